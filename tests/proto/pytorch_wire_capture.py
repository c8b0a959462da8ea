"""Captures the bytes PyTorch's own TCPStore client (the pinned torch) sends for every query type.

Usage: pytorch_wire_capture.py DAEMON FIXTURE (--check | --write)

A recording proxy sits between the client and a real meshrun-rendezvous (started here on port 0): every
operation runs on a fresh client connection, and once the client is gone (the proxy saw EOF) the bytes of
that connection are complete. Each connection starts with the same preamble (VALIDATE, then PING with the
client's pid as nonce); it is recorded once, as "connect", and cut from the others.

--write stores the capture in FIXTURE (tests/proto/pytorch_wire.txt: "NAME HEX" per line), which the C++
test test_request_codec.cpp checks our encoder and decoder against byte for byte. --check captures again
and fails when the pinned torch sends anything other than what FIXTURE says, so the fixture stays true.
"""
import datetime
import gc
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

import torch
import torch.distributed as dist

TIMEOUT = datetime.timedelta(seconds=10)

# NAME -> what the client does on its own connection. Keys and values are short and fixed so the fixture
# reads easily; the setup client (not recorded) puts whatever state an operation needs in place first.
OPERATIONS = [
    ("set", lambda s: s.set("k", "v")),
    ("get", lambda s: s.get("k")),  # the client WAITs for the key, then GETs it
    ("compare_set", lambda s: s.compare_set("k", "v", "w")),
    ("add", lambda s: s.add("n", 5)),
    ("check", lambda s: s.check(["k", "n"])),
    ("wait", lambda s: s.wait(["k"])),
    ("wait_timeout", lambda s: expect_timeout(lambda: s.wait(["absent"], datetime.timedelta(milliseconds=50)))),
    ("num_keys", lambda s: s.num_keys()),
    ("delete_key", lambda s: s.delete_key("k")),
    ("append", lambda s: s.append("a", "x")),
    ("multi_get", lambda s: s.multi_get(["m1", "m2"])),
    ("multi_set", lambda s: s.multi_set(["m1", "m2"], ["1", "2"])),
    ("queue_push", lambda s: s.queue_push("q", "item")),
    ("queue_pop", lambda s: s.queue_pop("q", block=False)),
    ("queue_pop_blocking", lambda s: s.queue_pop("q")),
    ("queue_len", lambda s: s.queue_len("q")),
    ("list_keys", lambda s: s.list_keys()),
    ("barrier", lambda s: s.barrier("b", 1)),
]


def expect_timeout(call):
    try:
        call()
    except dist.DistStoreError:
        return
    raise AssertionError("a wait on an absent key did not time out")


def setup(store, name):
    """State an operation needs before it runs (through the unrecorded setup client)."""
    if name in ("get", "compare_set", "wait", "delete_key"):
        store.set("k", "v")
    elif name in ("multi_get",):
        store.multi_set(["m1", "m2"], ["1", "2"])
    elif name in ("queue_pop", "queue_pop_blocking"):
        store.queue_push("q", "item")


class RecordingProxy:
    """Forwards 127.0.0.1:<port> to the daemon and keeps the client-to-daemon bytes of each connection.

    It runs in a process of its own (this script with --proxy): some of the client's calls hold Python's
    GIL while they wait for the reply, so a proxy thread in the client's process could never forward it.
    Connection N's bytes go to DIR/N.bin; DIR/N.done appears once the client has closed it.
    """

    def __init__(self, daemon_port, directory):
        self.directory = directory
        self.process = subprocess.Popen([sys.executable, __file__, "--proxy", str(daemon_port), directory],
                                        stdout=subprocess.PIPE, text=True)
        self.port = int(self.process.stdout.readline())

    def close(self):
        self.process.terminate()
        self.process.wait(timeout=10)

    def _count(self):
        return len([f for f in os.listdir(self.directory) if f.endswith(".bin")])

    def one_connection(self, action):
        """Runs action(store) on a fresh client; returns that connection's bytes once the client is gone."""
        first = self._count()
        store = dist.TCPStore("127.0.0.1", self.port, is_master=False, timeout=TIMEOUT)
        action(store)
        del store
        gc.collect()
        if self._count() != first + 1:
            raise AssertionError(f"expected one client connection, saw {self._count() - first}")
        done = os.path.join(self.directory, f"{first}.done")
        deadline = time.monotonic() + 10  # a safety net: the client closes its socket on destruction
        while not os.path.exists(done):
            if time.monotonic() > deadline:
                raise AssertionError("the client did not close its connection")
            time.sleep(0.01)
        with open(os.path.join(self.directory, f"{first}.bin"), "rb") as f:
            return f.read()


def serve_proxy(daemon_port, directory):
    """The --proxy process: accept, connect upstream, pump both ways, record client-to-daemon bytes."""
    listener = socket.create_server(("127.0.0.1", 0))
    print(listener.getsockname()[1], flush=True)

    def pump(source, sink, record_path):
        record = open(record_path, "wb") if record_path else None
        while True:
            chunk = source.recv(65536)
            if not chunk:
                break
            if record:
                record.write(chunk)
                record.flush()
            sink.sendall(chunk)
        try:
            sink.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        if record:
            record.close()
            open(record_path[:-4] + ".done", "w").close()

    index = 0
    while True:
        client, _ = listener.accept()
        upstream = socket.create_connection(("127.0.0.1", daemon_port))
        path = os.path.join(directory, f"{index}.bin")
        open(path, "wb").close()  # counted from accept on
        index += 1
        threading.Thread(target=pump, args=(client, upstream, path), daemon=True).start()
        threading.Thread(target=pump, args=(upstream, client, None), daemon=True).start()


def capture(daemon_path):
    daemon = subprocess.Popen([daemon_path, "--host", "127.0.0.1", "--port", "0", "--log-level", "warn"],
                              stdout=subprocess.PIPE, text=True)
    proxy = None
    try:
        port = int(daemon.stdout.readline().strip().rsplit(":", 1)[1])
        proxy = RecordingProxy(port, tempfile.mkdtemp(prefix="meshrun-wire-"))
        setup_client = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=TIMEOUT)
        preamble = proxy.one_connection(lambda s: None)
        nonce = os.getpid().to_bytes(4, "little")
        if not preamble.endswith(nonce):
            raise AssertionError(f"the connection preamble {preamble.hex()} does not end in the pid {os.getpid()}")
        captured = [("connect", preamble[:-4] + bytes(4))]  # the nonce (pid) varies: stored as 0
        for name, action in OPERATIONS:
            setup(setup_client, name)
            data = proxy.one_connection(action)
            if not data.startswith(preamble):
                raise AssertionError(f"{name}: the connection did not start with the preamble")
            captured.append((name, data[len(preamble):]))
        return captured
    finally:
        if proxy:
            proxy.close()
            shutil.rmtree(proxy.directory, ignore_errors=True)
        daemon.terminate()
        daemon.wait(timeout=10)


def main(daemon_path, fixture, mode):
    captured = capture(daemon_path)
    lines = [f"{name} {data.hex()}" for name, data in captured]
    header = (f"# PyTorch TCPStore client bytes per operation, captured from torch {torch.__version__} by "
              "tests/proto/pytorch_wire_capture.py --write (do not edit by hand)")
    if mode == "--write":
        with open(fixture, "w") as out:
            out.write(header + "\n" + "\n".join(lines) + "\n")
        print(f"wrote {len(lines)} captures to {fixture}")
        return 0
    want = [line for line in open(fixture).read().splitlines() if line and not line.startswith("#")]
    failures = 0
    for got_line, want_line in zip(lines, want):
        if got_line != want_line:
            failures += 1
            print(f"FAIL {got_line.split()[0]}:\n  torch sends {got_line}\n  fixture has {want_line}")
        else:
            print(f"ok   {got_line}")
    if len(lines) != len(want):
        failures += 1
        print(f"FAIL the fixture has {len(want)} captures, this script makes {len(lines)}: run --write")
    print(f"{failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--proxy":
        serve_proxy(int(sys.argv[2]), sys.argv[3])
    if len(sys.argv) != 4 or sys.argv[3] not in ("--check", "--write"):
        print(__doc__)
        sys.exit(2)
    sys.exit(main(*sys.argv[1:]))
