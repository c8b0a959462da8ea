"""Two real PyTorch processes run a Gloo all_reduce bootstrapped through a meshrun-rendezvous store,
exactly as init_process_group(env://) does under an agent store (TORCHELASTIC_USE_AGENT_STORE=True).

Usage: pytorch_gloo_job.py PATH/TO/meshrun-rendezvous
"""
import os
import subprocess
import sys

WORKER = r"""
import os, torch, torch.distributed as dist
dist.init_process_group("gloo", init_method="env://")
t = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(t)
assert t.item() == 3.0, t
dist.destroy_process_group()
print("rank", os.environ["RANK"], "ok")
"""


def main(daemon_path):
    daemon = subprocess.Popen([daemon_path, "--host", "127.0.0.1", "--port", "0", "--log-level", "warn"],
                              stdout=subprocess.PIPE, text=True)
    try:
        port = daemon.stdout.readline().strip().rsplit(":", 1)[1]
        workers = []
        for rank in range(2):
            env = dict(os.environ, RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                       MASTER_PORT=port, TORCHELASTIC_USE_AGENT_STORE="True", TORCHELASTIC_RESTART_COUNT="0")
            workers.append(subprocess.Popen([sys.executable, "-c", WORKER], env=env))
        codes = [w.wait(timeout=120) for w in workers]
        print("worker exit codes:", codes)
        return 0 if codes == [0, 0] else 1
    finally:
        daemon.terminate()
        daemon.wait(timeout=10)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
