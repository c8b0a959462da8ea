"""PyTorch's own TCPStore client (the pinned torch) against a real meshrun-rendezvous process.

Usage: pytorch_tcpstore_client.py PATH/TO/meshrun-rendezvous
Starts the daemon on port 0, reads its `listening on HOST:PORT` line, runs every store operation the
client offers, and exits non-zero on the first mismatch.
"""
import datetime
import subprocess
import sys
import threading
import time

import torch.distributed as dist

failures = []


def expect(name, got, want):
    if got != want:
        failures.append(f"{name}: got {got!r}, want {want!r}")
        print(f"FAIL {name}: got {got!r}, want {want!r}")
    else:
        print(f"ok   {name}")


def main(daemon_path):
    daemon = subprocess.Popen([daemon_path, "--host", "127.0.0.1", "--port", "0", "--log-level", "warn"],
                              stdout=subprocess.PIPE, text=True)
    try:
        first = daemon.stdout.readline().strip()
        expect("first stdout line announces the port", first.startswith("listening on 127.0.0.1:"), True)
        port = int(first.rsplit(":", 1)[1])
        timeout = datetime.timedelta(seconds=10)
        store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timeout)
        other = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timeout)

        store.set("key", "value")
        expect("set/get", store.get("key"), b"value")
        expect("get from another client", other.get("key"), b"value")
        expect("add", store.add("counter", 5), 5)
        expect("add negative", other.add("counter", -7), -2)
        expect("compare_set match", store.compare_set("key", "value", "new"), b"new")
        expect("compare_set mismatch", store.compare_set("key", "wrong", "x"), b"new")
        expect("compare_set absent, empty expected", store.compare_set("fresh", "", "made"), b"made")
        expect("check present", store.check(["key", "counter"]), True)
        expect("check absent", store.check(["key", "absent"]), False)
        store.append("log", "a")
        store.append("log", "b")
        expect("append", store.get("log"), b"ab")
        store.multi_set(["m1", "m2"], ["v1", "v2"])
        expect("multi_get", store.multi_get(["m1", "m2"]), [b"v1", b"v2"])
        expect("num_keys", store.num_keys(), 6)
        expect("delete_key existing", store.delete_key("m2"), True)
        expect("delete_key absent", store.delete_key("m2"), False)
        expect("list_keys", sorted(store.list_keys()), ["counter", "fresh", "key", "log", "m1"])

        # wait blocks until another client sets the key. The setter gives the waiter time to park, then
        # marks that it is setting: a wait that returned early finds the mark absent (an ordering check,
        # not a timing one: a slow waiter that arrives after the set is still right).
        setting = threading.Event()

        def set_later():
            time.sleep(0.3)
            setting.set()
            other.set("late", "here")
        setter = threading.Thread(target=set_later)
        setter.start()
        store.wait(["late"])
        expect("wait returned only after the set", setting.is_set(), True)
        expect("value after wait", store.get("late"), b"here")
        setter.join()

        # wait that times out, and the connection still works afterwards
        try:
            store.wait(["never"], datetime.timedelta(milliseconds=300))
            failures.append("wait on a missing key did not time out")
        except Exception as error:  # DistStoreError
            expect("wait timeout raises DistStoreError", type(error).__name__, "DistStoreError")
        expect("store usable after a timed-out wait", store.get("key"), b"new")

        # queues
        store.queue_push("q", "first")
        store.queue_push("q", "second")
        expect("queue_len", store.queue_len("q"), 2)
        expect("queue_pop order", store.queue_pop("q"), b"first")
        expect("queue_pop blocking", other.queue_pop("q", block=True), b"second")

        # A non-empty queue counts as present for check(), as on PyTorch's server (and for wait()).
        store.queue_push("jobs", "one")  # no reply: the round trip below orders it before other's check
        expect("queue_len after the push", store.queue_len("jobs"), 1)
        expect("check sees a non-empty queue", other.check(["jobs"]), True)
        store.queue_pop("jobs")
        expect("check after the queue emptied", other.check(["jobs"]), False)

        # add() reads the stored number as PyTorch's server does (std::stoll): leading spaces, the digits
        # up to the first other character.
        for stored, want in ((" 7", 8), ("12abc", 13), ("1.5", 2), ("-3", -2)):
            store.set("lenient", stored)
            expect(f"add on {stored!r}", store.add("lenient", 1), want)

        # Requests with more keys than 65,536 (one per rank of a 100k-rank job).
        many = [f"rank/{i}" for i in range(100_000)]
        parked = threading.Thread(target=lambda: other.wait(many, datetime.timedelta(seconds=60)))
        parked.start()
        expect("check on 100k missing keys", store.check(many), False)
        expect("get while a 100k-key wait is parked", store.get("key"), b"new")
        store.multi_set(many, [str(i) for i in range(100_000)])
        parked.join(timeout=60)
        expect("a wait on 100k keys is released by their multi_set", parked.is_alive(), False)
        values = store.multi_get(many)
        expect("multi_get of 100k keys", (len(values), values[0], values[-1]), (100_000, b"0", b"99999"))
        expect("check on 100k present keys", store.check(many), True)

        # PrefixStore, as init_process_group(env://) uses with TORCHELASTIC_USE_AGENT_STORE
        prefixed = dist.PrefixStore("/worker/attempt_0", store)
        prefixed.set("rank0", "ready")
        expect("prefix store", dist.PrefixStore("/worker/attempt_0", other).get("rank0"), b"ready")
    finally:
        daemon.terminate()
        code = daemon.wait(timeout=10)
        expect("daemon exits 0 on SIGTERM", code, 0)
    print(f"{len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
