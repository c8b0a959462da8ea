# For torchrun_agent_test.py: a Gloo job under torchrun's own elastic agent. It marks its start per attempt
# (OUT/start.<rank>.<attempt>) and per launch (OUT/launch.<its agent's pid>.<its pid>: an agent whose worker
# group restarted because another node re-joined keeps its restart count, so the attempt does not tell its
# launches apart), both before anything distributed; all-reduces, then: "ok" ends cleanly; "fail" makes
# rank 1 exit 3 in attempt 0 (every later attempt succeeds). Usage: torchrun_agent_job.py OUT MODE
import os
import sys

out, mode = sys.argv[1], sys.argv[2]
rank, attempt = os.environ["RANK"], int(os.environ["TORCHELASTIC_RESTART_COUNT"])
open(os.path.join(out, f"start.{rank}.{attempt}"), "w").write(os.environ["WORLD_SIZE"])
open(os.path.join(out, f"launch.{os.getppid()}.{os.getpid()}"), "w").close()

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

dist.init_process_group("gloo")
t = torch.ones(4)
dist.all_reduce(t)
if mode == "fail" and attempt == 0 and dist.get_rank() == 1:
    # Not sys.exit(3): the interpreter's teardown would destroy a Gloo process group that was never destroyed,
    # which aborts the process (SIGABRT, exit -6) when rank 0's failure lands at that moment (seen in CI).
    sys.stdout.flush()
    os._exit(3)
dist.barrier()
open(os.path.join(out, f"done.{rank}.{attempt}"), "w").write(str(int(t[0])))
dist.destroy_process_group()
