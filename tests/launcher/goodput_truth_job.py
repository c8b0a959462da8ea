"""A Gloo job that times its own work, for the goodput ledger's truth test (tests/launcher/goodput_truth_test.sh)
and bench/faults/chaos.sh: the ledger must agree with what the script itself measured.

    goodput_truth_job.py OUT STEPS [--beats]

Each step is compute (a fixed amount of matrix work), an all_reduce, rank 0's note of where the job is and the
beat, timed by the script from its start to its end with time.monotonic(); steps follow each other with nothing
in between but the line that records them, so the time in steps is the job's productive time. Rank 0 appends "ATTEMPT STEP START END" for every step that ended to
OUT/steps. Inside the run:
  - at STEPS/4 every rank stalls 5 s without a collective (a data wait);
  - at STEPS/2 rank 0 saves for 4 s while the others wait in barrier() (with --beats, every rank beats
    phase=checkpoint first and the step after);
  - at 3*STEPS/4, in the first attempt, rank 1 exits 1 once the job's own checkpoint of the step before is
    written (OUT/resume): the job restarts (--max-restarts 1) and goes on from that step, doing no step twice.
With --beats every rank beats each step it finishes (docs/progress.md); without, nothing but its collectives.
"""
import os
import socket
import sys
import time

import torch
import torch.distributed as dist

OUT, STEPS = sys.argv[1], int(sys.argv[2])
BEATS = "--beats" in sys.argv[3:]
_beat = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_NONBLOCK)


def beat(step, **fields):
    if not BEATS:
        return
    try:
        _beat.sendto(" ".join([f"step={step}"] + [f"{k}={v}" for k, v in fields.items()]).encode(),
                     os.environ["MESHRUN_PROGRESS"])
    except (KeyError, OSError):
        pass


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    resume = os.path.join(OUT, "resume")
    first = int(open(resume).read()) if os.path.exists(resume) else 0
    torch.set_num_threads(1)
    a = torch.randn(192, 192)
    grad = torch.zeros(256)
    log = open(os.path.join(OUT, "steps"), "a") if rank == 0 else None
    for step in range(first, STEPS):
        if step == 3 * STEPS // 4 and attempt == 0:
            dist.barrier()  # rank 0's checkpoint of the step before is written
            if rank == 1:
                os._exit(1)  # the job goes on from here
        if step == STEPS // 4:
            time.sleep(5)  # a stall: no collective, no beat
        if step == STEPS // 2:
            beat(step, phase="checkpoint")
            if rank == 0:
                time.sleep(4)  # the save
            dist.barrier()
            beat(step)
        start = time.monotonic()
        x = a
        for _ in range(12):
            x = (x @ a).tanh()
        grad.copy_(x.flatten()[:256])
        dist.all_reduce(grad)
        if log:  # the job's own checkpoint of where it is: part of the step's work
            with open(resume + ".tmp", "w") as f:
                f.write(str(step + 1))
            os.replace(resume + ".tmp", resume)
        beat(step + 1)
        end = time.monotonic()
        if log:
            log.write(f"{attempt} {step} {start:.6f} {end:.6f}\n")
            log.flush()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
