"""One row of a trainer benchmark: meshrun-trainer's run (output.dir) beside the PyTorch reference's run
(bench/trainer/train_fsdp2_reference.py's log) with the same settings. Used by bench/trainer/train.sh, strategies.sh and
memory.sh through run_pair in bench/trainer/trainer_env.sh.

Both sides are read the same way:
  step time    rank 0's median over the steps after the first SKIP (ours: metrics.jsonl's step_time_s;
               the reference: its step_times_s), so tokens/s = tokens per step / that median;
  peak         the largest peak RSS over the ranks (getrusage ru_maxrss);
  start        the largest baseline over the ranks: RSS just before the model is built, data opened;
  above start  the largest (peak - start) over the ranks: what the model, its gradients, optimizer state,
               activations and communication buffers added to the runtime.
Ratios are meshrun / reference: above 1 is faster for throughput, below 1 is less memory.

  trainer_compare.py train|strategies|memory OUT RANKS SKIP LABEL   (OUT.ref.log is the reference's log)
  trainer_compare.py header strategies|memory
"""
import json
import statistics
import sys

MIB = 2**20


def read_ours(out, ranks, skip):
    steps = [json.loads(l) for l in open(out + "/metrics.jsonl") if '"step_time_s"' in l]
    reps = [json.load(open(f"{out}/rank{r}.json")) for r in range(ranks)]
    times = [s["step_time_s"] for s in steps]
    tokens = steps[0]["tokens_per_s"] * steps[0]["step_time_s"]
    return summarize(times, round(tokens), reps, skip, reps[0]["losses"][-1])


def read_reference(log, ranks, skip):
    # Ranks print at the same moment: a line may hold two objects, so decode every object in it.
    reps, dec = [], json.JSONDecoder()
    for line in open(log):
        i = line.find('{"rank"')
        while i >= 0:
            obj, end = dec.raw_decode(line, i)
            reps.append(obj)
            i = line.find('{"rank"', end)
    reps.sort(key=lambda r: r["rank"])
    if len(reps) != ranks:
        sys.exit(f"{log}: {len(reps)} rank reports, expected {ranks}")
    return summarize(reps[0]["step_times_s"], reps[0]["tokens_per_step"], reps, skip, reps[0]["final_loss"])


def summarize(times, tokens_per_step, reps, skip, loss):
    step = statistics.median(times[skip:] or times)
    return {"step_s": step, "tokens_per_s": tokens_per_step / step, "loss": loss,
            "peak": max(r["peak_rss_bytes"] for r in reps) / MIB,
            "start": max(r["start_rss_bytes"] for r in reps) / MIB,
            "above": max(r["peak_rss_bytes"] - r["start_rss_bytes"] for r in reps) / MIB}


HEADERS = {
    "strategies": ("| {:<34} | {:>5} | {:>7} | {:>7} | {:>6} | {:>9} | {:>9} | {:>6} | {:>10} | {:>10} | {:>6} |",
                   ("strategy (FSDP2 equivalent)", "ranks", "it/s", "FSDP2", "x", "peak MB", "FSDP2", "x",
                    "above MB", "FSDP2", "x")),
    "memory": ("| {:<24} | {:>5} | {:>9} | {:>9} | {:>6} | {:>8} | {:>8} | {:>10} | {:>10} | {:>6} | {:>6} | {:>6} |",
               ("strategy", "ranks", "peak MB", "FSDP2", "x", "start MB", "FSDP2", "above MB", "FSDP2", "x",
                "s/step", "FSDP2")),
}


def main():
    if sys.argv[1] == "header":
        fmt, names = HEADERS[sys.argv[2]]
        print(fmt.format(*names))
        print(fmt.format(*["---"] * len(names)))
        return
    kind, out, ranks, skip, label = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    a, b = read_ours(out, ranks, skip), read_reference(out + ".ref.log", ranks, skip)
    speed, peak, above = a["tokens_per_s"] / b["tokens_per_s"], a["peak"] / b["peak"], a["above"] / b["above"]
    if kind == "train":
        print(f"{label:6s} world {ranks}: meshrun {a['tokens_per_s']:7.0f} tok/s, peak {a['peak']:6.1f} MiB, "
              f"above start {a['above']:6.1f} MiB | FSDP2 {b['tokens_per_s']:7.0f} tok/s, peak {b['peak']:6.1f} MiB, "
              f"above start {b['above']:6.1f} MiB | throughput x{speed:.2f}, memory x{peak:.2f} peak, "
              f"x{above:.2f} above start | loss {a['loss']:.3f} vs {b['loss']:.3f}")
    elif kind == "strategies":
        print(HEADERS[kind][0].format(label, ranks, f"{1 / a['step_s']:.2f}", f"{1 / b['step_s']:.2f}", f"{speed:.2f}",
                                      f"{a['peak']:.0f}", f"{b['peak']:.0f}", f"{peak:.2f}",
                                      f"{a['above']:.0f}", f"{b['above']:.0f}", f"{above:.2f}"))
    else:
        print(HEADERS[kind][0].format(label, ranks, f"{a['peak']:.0f}", f"{b['peak']:.0f}", f"{peak:.2f}",
                                      f"{a['start']:.0f}", f"{b['start']:.0f}", f"{a['above']:.0f}",
                                      f"{b['above']:.0f}", f"{above:.2f}", f"{a['step_s']:.2f}", f"{b['step_s']:.2f}"))


if __name__ == "__main__":
    main()
