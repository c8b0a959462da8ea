"""The world outside a job, for the "right by default" rows of default_jobs.py: what a rank waits on that is no part of
the job. Started by tests/launcher/defaults_test.sh and bench/faults/hang_defaults.sh beside the job, never by it.

    outside_world.py service PORT_FILE DELAY   an HTTP service on 127.0.0.1 (its port written to PORT_FILE):
                                               /score answers after DELAY seconds (no byte before, as a slow
                                               evaluation or judge service); /data streams 16 kB/s for DELAY seconds
    outside_world.py flag OUT DELAY            once OUT/fault exists (the rank began to poll), writes OUT/flag DELAY
                                               seconds later (an evaluation elsewhere, a data-sync daemon)
    outside_world.py feed FIFO DELAY           makes the named pipe FIFO and writes a line to it every 5 s for DELAY
                                               seconds, then closes it (a producer feeding a rank slowly)
"""
import http.server
import os
import sys
import time

CHUNK = 16 * 1024


class Handler(http.server.BaseHTTPRequestHandler):
    delay = 0.0

    def do_GET(self):
        if self.path.startswith("/data"):
            self.send_response(200)
            self.send_header("Content-Length", str(CHUNK * int(self.delay)))
            self.end_headers()
            for _ in range(int(self.delay)):
                self.wfile.write(b"x" * CHUNK)
                self.wfile.flush()
                time.sleep(1)
            return
        time.sleep(self.delay)
        body = b'{"score": 0.5}\n'
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def service(port_file, delay):
    Handler.delay = delay
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    with open(port_file + ".tmp", "w") as f:
        f.write(f"{server.server_address[1]}\n")
    os.replace(port_file + ".tmp", port_file)
    server.serve_forever()


def flag(out, delay):
    while not os.path.exists(os.path.join(out, "fault")):
        time.sleep(0.2)
    time.sleep(delay)
    open(os.path.join(out, "flag"), "w").close()


def feed(fifo, delay):
    if not os.path.exists(fifo):
        os.mkfifo(fifo)
    with open(fifo, "w") as f:  # blocks until the rank opens it
        end = time.monotonic() + delay
        n = 0
        while time.monotonic() < end:
            f.write(f"record {n}\n")
            f.flush()
            n += 1
            time.sleep(5)


if __name__ == "__main__":
    mode, where, delay = sys.argv[1], sys.argv[2], float(sys.argv[3])
    {"service": service, "flag": flag, "feed": feed}[mode](where, delay)
