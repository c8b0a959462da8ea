"""meshrun_torchrun's options (launcher/torchrun/meshrun_torchrun/options.py): --rdzv-endpoint lists and the
--rdzv-conf keys, with torch's spellings; every refusal names the key and the value. Pure: no etcd, no torch.
Usage: options_test.py   (prints 'N passed, M failed')
"""
import os
import sys
import tempfile
import traceback

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "launcher", "torchrun"))

from meshrun_torchrun.options import (DEFAULT_LEASE_TTL_S, DEFAULT_PREFIX, Endpoint, options_from,  # noqa: E402
                                      parse_endpoint, prefix_end, run_prefix)


def refused(endpoint, config, *fragments):
    try:
        options_from(endpoint, config)
    except ValueError as e:
        for fragment in fragments:
            assert fragment in str(e), f"'{e}' does not say '{fragment}'"
        return
    raise AssertionError(f"{endpoint} {config} was accepted")


def test_endpoints():
    assert parse_endpoint("etcd0") == (None, Endpoint("etcd0", 2379))
    assert parse_endpoint(" etcd0:2380 ") == (None, Endpoint("etcd0", 2380))
    assert parse_endpoint("http://10.0.0.1:2379/") == ("http", Endpoint("10.0.0.1", 2379))
    assert parse_endpoint("HTTPS://[fd00::1]:2379") == ("https", Endpoint("fd00::1", 2379))
    assert parse_endpoint("[fd00::1]") == (None, Endpoint("fd00::1", 2379))
    assert parse_endpoint("fd00::1") == (None, Endpoint("fd00::1", 2379))
    assert Endpoint("fd00::1", 2379).netloc() == "[fd00::1]:2379"
    o = options_from("etcd0:2379, etcd1:2379,etcd2,etcd0:2379,", {})
    assert o.endpoints == (Endpoint("etcd0", 2379), Endpoint("etcd1", 2379), Endpoint("etcd2", 2379)), o.endpoints
    assert o.describe() == "http://etcd0:2379,http://etcd1:2379,http://etcd2:2379"
    refused("", {}, "--rdzv-endpoint is empty")
    refused("etcd0:port", {}, "'port' is not a port")
    refused("etcd0:70000", {}, "'70000' is not a port")
    refused("unix://x", {}, "http or https")
    refused("http://a,https://b", {}, "mixes")


def test_defaults():
    o = options_from("etcd0", {"rank": "0", "timeout": "900", "join_timeout": "60"})  # torch's keys pass by
    assert not o.tls and o.ca_cert is None and o.username is None
    assert o.prefix == DEFAULT_PREFIX and o.lease_ttl_s == DEFAULT_LEASE_TTL_S and o.read_timeout_s == 30.0


def test_tls_keys():
    for spelling in ({"ca_cert": "ca", "ssl_cert": "c", "ssl_cert_key": "k"},  # torch's etcd-v2 backend
                     {"cacert": "ca", "cert": "c", "key": "k"}):  # torch's etcd backend
        o = options_from("etcd0", {"protocol": "https", **spelling})
        assert o.tls and (o.ca_cert, o.cert, o.key) == ("ca", "c", "k"), o
    assert options_from("https://etcd0", {}).tls
    assert options_from("https://etcd0", {"protocol": "HTTPS"}).tls
    refused("https://etcd0", {"protocol": "http"}, "contradicts")
    refused("etcd0", {"protocol": "ftp"}, "protocol=ftp")
    refused("etcd0", {"ca_cert": "ca"}, "protocol is http")
    refused("etcd0", {"protocol": "https", "ssl_cert_key": "k"}, "ssl_cert_key=k without ssl_cert")


def test_password():
    with tempfile.NamedTemporaryFile("w", suffix=".pw", delete=False) as f:
        f.write("s3cret, with a comma\n")
    try:
        o = options_from("etcd0", {"username": "rdzv", "password_file": f.name})
        assert (o.username, o.password) == ("rdzv", "s3cret, with a comma")
        assert options_from("etcd0", {"user": "u", "password": "p"}).password == "p"
        refused("etcd0", {"username": "u", "password": "p", "password_file": f.name}, "both password and password_file")
    finally:
        os.unlink(f.name)
    refused("etcd0", {"username": "u"}, "username=u without password")
    refused("etcd0", {"password": "p"}, "no username")
    refused("etcd0", {"username": "u", "password_file": "/nonexistent/pw"}, "password_file=/nonexistent/pw")


def test_numbers_and_prefix():
    o = options_from("etcd0", {"lease_ttl": "5", "read_timeout": "2.5", "etcd_prefix": "/jobs/rdzv/"})
    assert (o.lease_ttl_s, o.read_timeout_s, o.prefix) == (5, 2.5, "/jobs/rdzv")
    refused("etcd0", {"lease_ttl": "1"}, "lease_ttl=1", "at least 2")
    refused("etcd0", {"lease_ttl": "2.5"}, "whole seconds")
    refused("etcd0", {"read_timeout": "soon"}, "read_timeout=soon", "not a number")
    refused("etcd0", {"etcd_prefix": "jobs"}, "etcd_prefix=jobs", "start with '/'")


def test_run_prefix():
    assert run_prefix("/meshrun/torchrun", "job42") == "/meshrun/torchrun/job42/"
    for bad, fragment in (("", "empty"), ("a/b", "must not contain '/'")):
        try:
            run_prefix("/p", bad)
        except ValueError as e:
            assert fragment in str(e), e
        else:
            raise AssertionError(f"run id '{bad}' accepted")
    assert prefix_end(b"/a/") == b"/a0"
    assert prefix_end(b"a\xff") == b"b"
    assert prefix_end(b"\xff") == b"\0"


def main():
    passed = failed = 0
    for name, test in [(n, t) for n, t in globals().items() if n.startswith("test_")]:
        try:
            test()
            passed += 1
            print(f"PASS {name}")
        except Exception:
            failed += 1
            print(f"FAIL {name}")
            traceback.print_exc(file=sys.stdout)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
