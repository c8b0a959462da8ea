"""A real etcd member on 127.0.0.1 for the tests of meshrun_torchrun: started on free ports in a temporary
directory, optionally serving TLS (certificates made with openssl), stopped by pid.
"""
import json
import os
import socket
import ssl
import subprocess
import time
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def etcd_version(binary):
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, check=True).stdout
    return out.splitlines()[0].split()[-1]


def make_certs(directory):
    """A CA, a server certificate for 127.0.0.1, two client certificates (client: no Common Name, as etcd's
    gateway wants with --client-cert-auth and auth on; client-cn: CN rdzv) and a second, unrelated CA: EC keys,
    valid for a day. Returns their paths by name."""
    os.makedirs(directory, exist_ok=True)
    paths = {f"{who}.{ext}": os.path.join(directory, f"{who}.{ext}")
             for who in ("ca", "server", "client", "client-cn", "other-ca") for ext in ("crt", "key")}

    def run(*args):
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=directory)

    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    for ca in ("ca", "other-ca"):
        run("req", "-x509", *ec, "-keyout", paths[f"{ca}.key"], "-out", paths[f"{ca}.crt"], "-days", "1",
            "-subj", f"/CN=meshrun test {ca}")
    for who, subject, usage in (("server", "/CN=127.0.0.1", "serverAuth,clientAuth"),
                                ("client", "/O=meshrun test client", "clientAuth"),
                                ("client-cn", "/CN=rdzv", "clientAuth")):
        csr = os.path.join(directory, f"{who}.csr")
        ext = os.path.join(directory, f"{who}.ext")
        with open(ext, "w") as f:
            f.write(f"subjectAltName=IP:127.0.0.1\nextendedKeyUsage={usage}\n")
        run("req", *ec, "-keyout", paths[f"{who}.key"], "-out", csr, "-subj", subject)
        run("x509", "-req", "-in", csr, "-CA", paths["ca.crt"], "-CAkey", paths["ca.key"], "-CAcreateserial",
            "-out", paths[f"{who}.crt"], "-days", "1", "-extfile", ext)
    return paths


class EtcdServer:
    """One etcd member. With certs (make_certs), clients must speak TLS and show a certificate of the CA."""

    def __init__(self, binary, directory, certs=None):
        self.binary, self.directory, self.certs = binary, directory, certs
        self.port, self.peer_port = free_port(), free_port()
        self.scheme = "https" if certs else "http"
        self.endpoint = f"127.0.0.1:{self.port}"
        self.log_path = os.path.join(directory, "etcd.log")
        self.process = None

    def start(self):
        os.makedirs(self.directory, exist_ok=True)
        url = f"{self.scheme}://{self.endpoint}"
        peer = f"http://127.0.0.1:{self.peer_port}"
        argv = [self.binary, "--name", "t", "--data-dir", os.path.join(self.directory, "data"),
                "--listen-client-urls", url, "--advertise-client-urls", url,
                "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                "--initial-cluster", f"t={peer}", "--initial-cluster-state", "new"]
        if self.certs:
            argv += ["--cert-file", self.certs["server.crt"], "--key-file", self.certs["server.key"],
                     "--trusted-ca-file", self.certs["ca.crt"], "--client-cert-auth"]
        with open(self.log_path, "w") as log:
            self.process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        context = None
        if self.certs:
            context = ssl.create_default_context(cafile=self.certs["ca.crt"])
            context.load_cert_chain(self.certs["client.crt"], self.certs["client.key"])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=1, context=context) as r:
                    if json.load(r).get("health") == "true":
                        return self
            except OSError:
                time.sleep(0.1)
        self.stop()
        with open(self.log_path) as f:
            raise RuntimeError(f"etcd did not come up on {url}:\n{f.read()[-2000:]}")

    def stop(self):
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
