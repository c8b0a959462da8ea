"""meshrun_torchrun (launcher/torchrun/) against a real etcd: its client, torch's RendezvousBackend and Store
on it, the run's leases, TLS and user/password, and stock torchrun finding it by its entry point.
Two etcd members on 127.0.0.1, started here: a plain one, and one that serves TLS only, wants a client
certificate and has auth enabled (users root, rdzv with read-write on /meshrun/, other with no role).

  failover             the first endpoint is dead: calls go to the second; all dead: the error names both
  cas                  two agents race on the state: the loser gets the winner's state and token, then wins
                       with that token; a stale token loses; a vanished state reads as None
  store                torch's Store semantics through torch's PrefixStore (set/get, add, compare_set,
                       check, wait and its timeout, a wait woken by another agent's set, multi_get/multi_set,
                       delete_key, num_keys)
  last_out             two agents: the first to shut down leaves the run's keys, the last deletes them all
  dead_run             an agent killed -9: its run's keys are gone once the lease TTL (2 s) passed
  lease_replaced       the run lease gone under a live agent (revoked): its next write makes a new one
  tls_auth             TLS with a client certificate and a password; a wrong password, a user without
                       permission, a missing client certificate, an unknown CA and a client certificate with a
                       Common Name (etcd's gateway refuses one when auth is on) are refused, naming why; an
                       expired token is renewed
  torchrun             two stock torchrun agents (.venv) with --rdzv-backend etcd-v3 over TLS with a
                       password: a Gloo job ends 0 on both, ranks 0 and 1 of 2, and no key is left
Usage: etcd_backend_test.py ETCD_BINARY VENV_BIN   (prints 'N passed, M failed'; 77: the etcd binary is
       missing, outside CI)
"""
import datetime
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ETCD, VENV_BIN = sys.argv[1], os.path.abspath(sys.argv[2])
if not os.access(ETCD, os.X_OK):
    why = f"{ETCD} is missing (scripts/setup.sh installs it)"
    if os.environ.get("CI") == "true":
        sys.exit(f"FAIL (CI=true, nothing may be skipped): {why}")
    print(f"SKIPPED: {why}")
    sys.exit(77)

WORK = tempfile.mkdtemp(prefix="meshrun-etcd-v3-")
SITE = subprocess.run([sys.executable, os.path.join(HERE, "make_site.py"), os.path.join(WORK, "site")],
                      check=True, capture_output=True, text=True).stdout.strip()
sys.path.insert(0, SITE)
sys.path.insert(0, HERE)

import torch.distributed as dist  # noqa: E402

from etcd_server import EtcdServer, etcd_version, free_port, make_certs  # noqa: E402
from meshrun_torchrun.etcd_client import EtcdClient, EtcdRequestError, EtcdUnavailableError  # noqa: E402
from meshrun_torchrun.options import options_from, prefix_end  # noqa: E402
from meshrun_torchrun.rendezvous_backend import EtcdV3RendezvousBackend  # noqa: E402
from meshrun_torchrun.run_session import RunSession  # noqa: E402
from meshrun_torchrun.store import EtcdV3Store  # noqa: E402

PLAIN = EtcdServer(ETCD, os.path.join(WORK, "plain"))
CERTS = make_certs(os.path.join(WORK, "certs"))
SECURE = EtcdServer(ETCD, os.path.join(WORK, "secure"), certs=CERTS)
PASSWORD_FILE = os.path.join(WORK, "rdzv.password")
SESSIONS = []


def client(endpoint=None, **conf):
    return EtcdClient(options_from(endpoint or PLAIN.endpoint, {"read_timeout": "5", **conf}))


def secure_conf(**extra):
    return {"protocol": "https", "ca_cert": CERTS["ca.crt"], "ssl_cert": CERTS["client.crt"],
            "ssl_cert_key": CERTS["client.key"], "read_timeout": "5", **extra}


def session(run_id, endpoint=None, **conf):
    s = RunSession(client(endpoint, **conf), run_id)
    s.start()
    SESSIONS.append(s)
    return s


def count_keys(c, prefix):
    _, count, _ = c.range(prefix, prefix_end(prefix), count_only=True)
    return count


def expect_raises(kind, call, *fragments):
    try:
        call()
    except kind as e:
        for fragment in fragments:
            assert fragment in str(e), f"{kind.__name__} '{e}' does not say '{fragment}'"
        return e
    raise AssertionError(f"expected {kind.__name__}")


# ---- the tests ----

def test_failover():
    dead = f"127.0.0.1:{free_port()}"
    c = client(f"{dead},{PLAIN.endpoint}")
    c.put(b"/meshrun/test/failover", b"v")
    assert c.get(b"/meshrun/test/failover").value == b"v"
    assert c.options.endpoints[c._preferred].netloc() == PLAIN.endpoint, "the live member was not remembered"
    other = f"127.0.0.1:{free_port()}"
    expect_raises(EtcdUnavailableError, lambda: client(f"{dead},{other}", read_timeout="1").get(b"x"),
                  dead, other, "within 1 s")


def test_cas():
    a = EtcdV3RendezvousBackend(session("cas"))
    b = EtcdV3RendezvousBackend(session("cas"))
    assert a.get_state() is None
    state, token_a, won = a.set_state(b"from a")
    assert won and state == b"from a"
    state, token, won = b.set_state(b"from b")  # no token: only if absent; it is not
    assert (state, token, won) == (b"from a", token_a, False), (state, token, won)
    state, token_b, won = b.set_state(b"from b", token_a)
    assert won and state == b"from b" and token_b > token_a
    state, token, won = a.set_state(b"late a", token_a)  # a's token is stale now
    assert (state, token, won) == (b"from b", token_b, False), (state, token, won)
    assert a.get_state() == (b"from b", token_b)
    assert a.set_state(b"x", "not a revision") == (b"from b", token_b, False)
    a._client.delete(a._session.state_key)
    assert a.get_state() is None
    assert a.set_state(b"x", token_b) is None, "a vanished state must read as None"


def test_store():
    store = EtcdV3Store(session("store"), timeout=datetime.timedelta(seconds=10))
    prefixed = dist.PrefixStore("round.0", store)
    prefixed.set("a", "1")
    assert prefixed.get("a") == b"1"
    assert prefixed.add("n", 2) == 2 and prefixed.add("n", 3) == 5 and prefixed.get("n") == b"5"
    assert prefixed.compare_set("c", "", "first") == b"first"
    assert prefixed.compare_set("c", "wrong", "second") == b"first"
    assert prefixed.compare_set("c", "first", "second") == b"second"
    assert prefixed.compare_set("missing", "expected", "x") == b"expected"
    assert prefixed.check(["a", "n"]) and not prefixed.check(["a", "absent"])
    prefixed.multi_set(["m0", "m1"], ["x", "y"])
    assert prefixed.multi_get(["m0", "m1"]) == [b"x", b"y"]
    started = time.monotonic()
    expect_raises(dist.DistStoreError, lambda: prefixed.wait(["never"], datetime.timedelta(seconds=0.5)), "never")
    assert time.monotonic() - started >= 0.5
    # A wait that another agent's set ends (the watch): the set comes while the wait is under way.
    other_store = EtcdV3Store(session("store"))  # kept: torch's PrefixStore holds only its C++ side
    other = dist.PrefixStore("round.0", other_store)
    setter = threading.Timer(0.5, lambda: other.set("later", "here"))
    setter.start()
    assert prefixed.get("later") == b"here"
    setter.join()
    assert store.num_keys() == 6, store.num_keys()  # a, n, c, m0, m1, later
    assert store.delete_key("round.0/a") and not store.delete_key("round.0/a")
    assert store.num_keys() == 5


def test_last_out():
    c = client()
    first, last = session("last_out"), session("last_out")
    EtcdV3Store(first).set("k", "v")
    EtcdV3RendezvousBackend(first).set_state(b"state")
    assert not first.close(run_ended=True), "the first agent out deleted the run"
    assert count_keys(c, last.prefix) >= 3, "the run's keys went with the first agent"
    assert count_keys(c, last.agents_prefix) == 1
    assert last.close(run_ended=True), "the last agent out did not delete the run"
    assert count_keys(c, last.prefix) == 0


CHILD = r"""
import sys, time
sys.path.insert(0, sys.argv[1])
from meshrun_torchrun.etcd_client import EtcdClient
from meshrun_torchrun.options import options_from
from meshrun_torchrun.rendezvous_backend import EtcdV3RendezvousBackend
from meshrun_torchrun.run_session import RunSession
from meshrun_torchrun.store import EtcdV3Store
s = RunSession(EtcdClient(options_from(sys.argv[2], {"lease_ttl": "2"})), "dead_run")
s.start()
EtcdV3RendezvousBackend(s).set_state(b"state")
EtcdV3Store(s).set("k", "v")
print("ready", flush=True)
time.sleep(600)
"""


def test_dead_run():
    c = client()
    child = subprocess.Popen([sys.executable, "-c", CHILD, SITE, PLAIN.endpoint], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready", "the agent did not start"
        prefix = b"/meshrun/torchrun/dead_run/"
        assert count_keys(c, prefix) == 4, count_keys(c, prefix)  # lease, agent, state, store key
        time.sleep(3)  # several renewals (every TTL/3): the keys stay while the agent lives
        assert count_keys(c, prefix) == 4, "the keys of a live agent expired"
        child.send_signal(signal.SIGKILL)
        child.wait()
        deadline = time.monotonic() + 30
        while count_keys(c, prefix) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert count_keys(c, prefix) == 0, f"{count_keys(c, prefix)} keys of the dead run left"
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_lease_replaced():
    s = session("lease_replaced")
    old = s.run_lease()
    s.client.revoke(old)  # as if it expired: its keys are gone
    assert s.client.get(s.lease_key) is None
    EtcdV3Store(s).set("k", "v")  # "lease not found": a new run lease, the write goes through
    assert s.run_lease() != old
    assert s.client.get(s.lease_key).lease == s.run_lease()
    assert s.client.get(s.store_prefix + b"k").lease == s.run_lease()


def set_up_auth():
    """Users root, rdzv (read-write on /meshrun/) and other (no role); then auth on. Through the TLS client."""
    c = EtcdClient(options_from(f"https://{SECURE.endpoint}", secure_conf()))
    for user, password in (("root", "rootpw"), ("rdzv", "rdzv pw, with a comma"), ("other", "otherpw")):
        c.call("/v3/auth/user/add", {"name": user, "password": password})
    c.call("/v3/auth/role/add", {"name": "root"})
    c.call("/v3/auth/user/grant", {"user": "root", "role": "root"})
    c.call("/v3/auth/role/add", {"name": "rdzv"})
    from meshrun_torchrun.etcd_client import b64
    c.call("/v3/auth/role/grant", {"name": "rdzv", "perm": {"permType": "READWRITE", "key": b64(b"/meshrun/"),
                                                            "range_end": b64(b"/meshrun0")}})
    c.call("/v3/auth/user/grant", {"user": "rdzv", "role": "rdzv"})
    c.call("/v3/auth/enable", {})
    with open(PASSWORD_FILE, "w") as f:
        f.write("rdzv pw, with a comma\n")


def test_tls_auth():
    endpoint = f"https://{SECURE.endpoint}"
    c = EtcdClient(options_from(endpoint, secure_conf(username="rdzv", password_file=PASSWORD_FILE)))
    c.put(b"/meshrun/test/tls", b"v")
    assert c.get(b"/meshrun/test/tls").value == b"v"
    c._token = "x" * 16 + ".1"  # an expired token (etcd forgets them after 5 minutes)
    assert c.get(b"/meshrun/test/tls").value == b"v"
    assert c._token != "x" * 16 + ".1"
    s = RunSession(c, "tls")
    s.start()
    EtcdV3RendezvousBackend(s).set_state(b"state")
    assert s.close(run_ended=True)
    expect_raises(EtcdRequestError, lambda: EtcdClient(options_from(endpoint, secure_conf(
        username="rdzv", password="wrong"))).get(b"/meshrun/x"), "authentication failed")
    expect_raises(EtcdRequestError, lambda: EtcdClient(options_from(endpoint, secure_conf(
        username="other", password="otherpw"))).get(b"/meshrun/x"), "permission denied")
    no_cert = {k: v for k, v in secure_conf(username="rdzv", password_file=PASSWORD_FILE, read_timeout="1").items()
               if k not in ("ssl_cert", "ssl_cert_key")}
    expect_raises(EtcdUnavailableError, lambda: EtcdClient(options_from(endpoint, no_cert)).get(b"/meshrun/x"),
                  SECURE.endpoint)
    expect_raises(EtcdRequestError, lambda: EtcdClient(options_from(endpoint, secure_conf(
        ca_cert=CERTS["other-ca.crt"]))).get(b"/meshrun/x"), "TLS", "was not accepted", "other-ca.crt")
    expect_raises(EtcdRequestError, lambda: EtcdClient(options_from(endpoint, secure_conf(
        ssl_cert=CERTS["client-cn.crt"], ssl_cert_key=CERTS["client-cn.key"], username="rdzv",
        password_file=PASSWORD_FILE))).get(b"/meshrun/x"), "CommonName", "without a Common Name")


JOB = r"""
import os, sys, torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(1)
dist.all_reduce(t)
open(os.path.join(sys.argv[1], f"rank{dist.get_rank()}"), "w").write(f"{dist.get_world_size()} {t.item()}")
dist.destroy_process_group()
"""


def test_torchrun():
    out = os.path.join(WORK, "job")
    os.makedirs(out)
    job = os.path.join(WORK, "job.py")
    with open(job, "w") as f:
        f.write(JOB)
    conf = ",".join(f"{k}={v}" for k, v in secure_conf(username="rdzv", password_file=PASSWORD_FILE,
                                                         read_timeout="10").items())
    env = {"PATH": f"{VENV_BIN}:/usr/bin:/bin", "HOME": os.environ.get("HOME", "/root"), "PYTHONPATH": SITE}
    argv = [os.path.join(VENV_BIN, "torchrun"), "--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend",
            "etcd-v3", "--rdzv-endpoint", f"https://{SECURE.endpoint}", "--rdzv-id", "tls-job", "--rdzv-conf", conf,
            "--local-addr", "127.0.0.1", "--monitor-interval", "0.5", job, out]
    agents = [subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
              for _ in range(2)]
    outputs = []
    for agent in agents:
        try:
            outputs.append(agent.communicate(timeout=120)[0])
        except subprocess.TimeoutExpired:
            agent.kill()
            outputs.append(agent.communicate()[0])
    codes = [a.returncode for a in agents]
    assert codes == [0, 0], f"torchrun exited {codes}:\n" + "\n----\n".join(o[-3000:] for o in outputs)
    for rank in (0, 1):
        with open(os.path.join(out, f"rank{rank}")) as f:
            assert f.read() == "2 2.0", f"rank {rank}"
    c = EtcdClient(options_from(f"https://{SECURE.endpoint}",
                                secure_conf(username="rdzv", password_file=PASSWORD_FILE)))
    assert count_keys(c, b"/meshrun/torchrun/tls-job/") == 0, "the job's keys are left in etcd"


def main():
    print(f"etcd {etcd_version(ETCD)} ({ETCD}); torch {__import__('torch').__version__}")
    passed = failed = 0
    try:
        PLAIN.start()
        SECURE.start()
        set_up_auth()
        for name in ("failover", "cas", "store", "last_out", "dead_run", "lease_replaced", "tls_auth", "torchrun"):
            started = time.monotonic()
            try:
                globals()[f"test_{name}"]()
                passed += 1
                print(f"PASS {name} ({time.monotonic() - started:.1f} s)")
            except Exception:
                failed += 1
                print(f"FAIL {name}")
                traceback.print_exc(file=sys.stdout)
    finally:
        for s in SESSIONS:
            s.close(run_ended=False)
        PLAIN.stop()
        SECURE.stop()
        shutil.rmtree(WORK, ignore_errors=True)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
