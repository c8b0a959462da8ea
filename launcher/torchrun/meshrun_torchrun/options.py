"""The options of `torchrun --rdzv-backend etcd-v3`: the --rdzv-endpoint list and the --rdzv-conf keys.

Pure: no I/O besides reading a password file, no torch. Keys keep the names torch's own etcd backends use
(`protocol`, `ca_cert`/`cacert`, `ssl_cert`/`cert`, `ssl_cert_key`/`key`, `read_timeout`, `etcd_prefix`),
plus what etcd v3 adds (`username`, `password`, `password_file`, `lease_ttl`). Every error names the key
and the value.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Optional, Tuple

DEFAULT_PORT = 2379
DEFAULT_PREFIX = "/meshrun/torchrun"
# A key of a run lives as long as some agent of the run renews its lease; this long after the last agent
# stopped renewing (killed, host lost), etcd deletes every key of the run.
DEFAULT_LEASE_TTL_S = 30
# etcd's own floor for a lease TTL (1.5 election timeouts with its defaults, rounded up): a shorter TTL is
# raised to it by the server.
MIN_LEASE_TTL_S = 2
# One etcd operation, across every member, before it fails (each member gets at most MEMBER_TIMEOUT_S).
DEFAULT_READ_TIMEOUT_S = 30.0
MEMBER_TIMEOUT_S = 3.0


@dataclasses.dataclass(frozen=True)
class Endpoint:
    """One etcd member's client address."""

    host: str
    port: int

    def netloc(self) -> str:
        """host:port, with an IPv6 address in brackets."""
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


@dataclasses.dataclass(frozen=True)
class EtcdOptions:
    """Where etcd is and how to talk to it; what the run's keys look like."""

    endpoints: Tuple[Endpoint, ...]
    tls: bool
    ca_cert: Optional[str]  # None: the system's trusted CAs
    cert: Optional[str]  # client certificate (PEM), for etcd's --client-cert-auth
    key: Optional[str]  # its private key, when not in the certificate file
    username: Optional[str]
    password: Optional[str]
    read_timeout_s: float
    prefix: str  # every run's keys are under <prefix>/<run id>/
    lease_ttl_s: int

    def describe(self) -> str:
        """The endpoints as a user wrote them, for messages."""
        scheme = "https" if self.tls else "http"
        return ",".join(f"{scheme}://{e.netloc()}" for e in self.endpoints)


def parse_endpoint(text: str) -> Tuple[Optional[str], Endpoint]:
    """'[scheme://]host[:port]' -> (scheme or None, Endpoint); IPv6 as [addr]:port."""
    item = text.strip()
    scheme = None
    if "://" in item:
        scheme, item = item.split("://", 1)
        scheme = scheme.lower()
        if scheme not in ("http", "https"):
            raise ValueError(f"etcd endpoint '{text}': the scheme must be http or https")
    item = item.rstrip("/")
    if not item:
        raise ValueError(f"etcd endpoint '{text}' names no host")
    port = DEFAULT_PORT
    if item.startswith("["):
        close = item.find("]")
        if close < 0:
            raise ValueError(f"etcd endpoint '{text}': '[' without ']'")
        host, rest = item[1:close], item[close + 1:]
        if rest:
            if not rest.startswith(":"):
                raise ValueError(f"etcd endpoint '{text}': expected ':port' after ']'")
            port = _port(text, rest[1:])
    elif item.count(":") == 1:
        host, port_text = item.split(":")
        port = _port(text, port_text)
    elif ":" in item:
        host = item  # a bare IPv6 address: the default port
    else:
        host = item
    if not host:
        raise ValueError(f"etcd endpoint '{text}' names no host")
    return scheme, Endpoint(host, port)


def _port(text: str, port_text: str) -> int:
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(f"etcd endpoint '{text}': '{port_text}' is not a port")
    return int(port_text)


def _first(config: Mapping[str, Any], *names: str) -> Optional[str]:
    """The value of the first of names that is set (torch's spellings differ between its backends)."""
    for name in names:
        value = config.get(name)
        if value is not None and str(value).strip() != "":
            return str(value).strip()
    return None


def _number(config: Mapping[str, Any], name: str, default: float, minimum: float) -> float:
    value = config.get(name)
    if value is None or str(value).strip() == "":
        return default
    try:
        number = float(value)
    except ValueError:
        raise ValueError(f"--rdzv-conf {name}={value}: not a number") from None
    if not number >= minimum:
        raise ValueError(f"--rdzv-conf {name}={value}: must be at least {minimum:g}")
    return number


def options_from(endpoint: str, config: Mapping[str, Any]) -> EtcdOptions:
    """The options from torchrun's --rdzv-endpoint and --rdzv-conf (RendezvousParameters' endpoint and config)."""
    if not endpoint or not endpoint.strip():
        raise ValueError("--rdzv-endpoint is empty: name the etcd members, e.g. etcd0:2379,etcd1:2379")
    schemes, endpoints = set(), []
    for item in endpoint.split(","):
        if not item.strip():
            continue
        scheme, parsed = parse_endpoint(item)
        if scheme:
            schemes.add(scheme)
        if parsed not in endpoints:
            endpoints.append(parsed)
    if len(schemes) > 1:
        raise ValueError(f"--rdzv-endpoint {endpoint}: mixes http:// and https://")
    protocol = _first(config, "protocol")
    if protocol is not None:
        protocol = protocol.lower()
        if protocol not in ("http", "https"):
            raise ValueError(f"--rdzv-conf protocol={protocol}: must be http or https")
        if schemes and protocol not in schemes:
            raise ValueError(f"--rdzv-conf protocol={protocol} contradicts --rdzv-endpoint {endpoint}")
    tls = (protocol or (schemes.pop() if schemes else "http")) == "https"

    ca_cert = _first(config, "ca_cert", "cacert")
    cert = _first(config, "ssl_cert", "cert")
    key = _first(config, "ssl_cert_key", "key")
    if not tls and (ca_cert or cert or key):
        raise ValueError("--rdzv-conf names TLS files (ca_cert, ssl_cert, ssl_cert_key) but the protocol is "
                         "http: add protocol=https or use https:// endpoints")
    if key and not cert:
        raise ValueError(f"--rdzv-conf ssl_cert_key={key} without ssl_cert: name the client certificate too")

    username = _first(config, "username", "user")
    password = config.get("password")
    password_file = _first(config, "password_file")
    if password_file:
        if password is not None:
            raise ValueError("--rdzv-conf has both password and password_file: use one")
        try:
            with open(password_file, encoding="utf-8") as f:
                password = f.read().rstrip("\r\n")
        except OSError as e:
            raise ValueError(f"--rdzv-conf password_file={password_file}: {e.strerror}") from None
    if username and password is None:
        raise ValueError(f"--rdzv-conf username={username} without password or password_file")
    if password is not None and not username:
        raise ValueError("--rdzv-conf has a password but no username")

    prefix = (_first(config, "etcd_prefix") or DEFAULT_PREFIX).rstrip("/")
    if not prefix.startswith("/"):
        raise ValueError(f"--rdzv-conf etcd_prefix={prefix}: must start with '/'")
    lease_ttl = _number(config, "lease_ttl", DEFAULT_LEASE_TTL_S, MIN_LEASE_TTL_S)
    if lease_ttl != int(lease_ttl):
        raise ValueError(f"--rdzv-conf lease_ttl={config.get('lease_ttl')}: whole seconds only")
    read_timeout = _number(config, "read_timeout", DEFAULT_READ_TIMEOUT_S, 0.1)
    return EtcdOptions(endpoints=tuple(endpoints), tls=tls, ca_cert=ca_cert, cert=cert, key=key,
                       username=username, password=None if password is None else str(password),
                       read_timeout_s=read_timeout, prefix=prefix, lease_ttl_s=int(lease_ttl))


def run_prefix(prefix: str, run_id: str) -> str:
    """'<prefix>/<run id>/': every key of the run starts with it. A '/' in the run id would put one run's keys
    inside another's range, so it is refused."""
    if not run_id:
        raise ValueError("the run id (--rdzv-id) is empty")
    if "/" in run_id:
        raise ValueError(f"--rdzv-id {run_id}: must not contain '/' (its keys would fall inside another run's)")
    return f"{prefix}/{run_id}/"


def prefix_end(prefix: bytes) -> bytes:
    """etcd's range_end for 'every key that starts with prefix': the prefix with its last byte plus one."""
    end = bytearray(prefix)
    while end:
        if end[-1] < 0xFF:
            end[-1] += 1
            return bytes(end)
        end.pop()
    return b"\0"  # every key
