# Whether this worker's agent has a standby interpreter up (docs/multi-node.md#standby-workers): the agent's
# children running meshrun's standby bootstrap. Tests hold a worker on this before they end it, so that the
# restart starts from the standby.
import os


def standby_is_up(count=1):
    """True once `count` of the agent's standbys are running."""
    up = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().split(b"\0")
            with open(f"/proc/{pid}/stat") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
        except OSError:
            continue
        if parent == os.getppid() and any(arg.endswith(b"_meshrun_standby.py") for arg in cmdline):
            up += 1
    return up >= count
