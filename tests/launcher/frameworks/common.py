"""What every framework job reports, for frameworks_test.sh: the rank's view of the job (from the framework
itself), whether this process is the one meshrun spawned (a framework that spawned workers of its own would
run its ranks in children), and a checksum of the trained weights (ranks must agree)."""
import json
import os


def report(out, framework, rank, world_size, weights, **extra):
    checksum = float(sum(float(w.detach().double().sum()) for w in weights))
    record = {
        "framework": framework,
        "rank": int(rank),
        "world_size": int(world_size),
        "env_rank": int(os.environ["RANK"]),
        "spawned_by_meshrun": os.environ.get("MESHRUN_AGENT_PID") == str(os.getppid()),
        "checksum": checksum,
        **extra,
    }
    with open(os.path.join(out, f"{framework}.{os.environ['RANK']}.json"), "w") as f:
        json.dump(record, f)
