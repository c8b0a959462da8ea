"""A client of etcd's v3 API through its JSON gateway (POST /v3/...), with the standard library only.

What the gateway looks like (etcd 3.4 and 3.5): keys and values are base64, int64 fields (revisions, lease
ids, TTLs) are JSON strings, and fields that are false, zero or empty are left out, so a missing field reads
as its zero. Errors come back as {"error", "message", "code"} with the gRPC code (5: not found, 7:
permission denied, 14: unavailable, 16: unauthenticated).

Members: every call goes to the member that answered last and, when it cannot be reached or answers that it
cannot serve (no leader, leader changed, timed out: 5xx, codes 4, 13 and 14), to the next, in the order of
--rdzv-endpoint, until one answers or read_timeout has passed; each member gets at most MEMBER_TIMEOUT_S. A
refusal (bad request, permission denied, lease not found) is the cluster's answer and is not retried
elsewhere.

Auth: with a username, the client authenticates (/v3/auth/authenticate) before its first call and again when
a member answers that the token is invalid (etcd's simple tokens expire after 5 minutes unused, and a
restarted member forgets them). The token travels in the Authorization header.
"""
from __future__ import annotations

import base64
import collections
import http.client
import json
import random
import socket
import ssl
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

from .options import MEMBER_TIMEOUT_S, Endpoint, EtcdOptions

GRPC_DEADLINE_EXCEEDED = 4
GRPC_NOT_FOUND = 5
GRPC_INTERNAL = 13
GRPC_UNAVAILABLE = 14
GRPC_UNAUTHENTICATED = 16
# A member answering with these cannot serve the call now; another member may.
_TRY_ANOTHER_MEMBER = {GRPC_DEADLINE_EXCEEDED, GRPC_INTERNAL, GRPC_UNAVAILABLE}

KeyValue = collections.namedtuple("KeyValue", "key value create_revision mod_revision version lease")
KeyValue.__doc__ = "One key as etcd returns it: bytes key and value, int revisions, version and lease id."


class EtcdError(Exception):
    """Base of this client's errors."""


class EtcdUnavailableError(EtcdError):
    """No member answered within the read timeout; the message names each member and what went wrong."""


class EtcdRequestError(EtcdError):
    """The cluster refused the request (its gRPC code and message)."""

    def __init__(self, path: str, status: int, code: Optional[int], message: str) -> None:
        super().__init__(f"etcd refused {path}: {message} (HTTP {status}, code {code})")
        self.status = status
        self.code = code
        self.message = message

    @property
    def lease_not_found(self) -> bool:
        return self.code == GRPC_NOT_FOUND and "lease not found" in self.message


class _MemberDown(Exception):
    """This member cannot serve the call now (unreachable, no leader, timed out): try the next."""


class _TokenRejected(Exception):
    """The member answered that the auth token is invalid: authenticate again."""


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def unb64(text: Optional[str]) -> bytes:
    return base64.b64decode(text) if text else b""


def _int(doc: Dict[str, Any], name: str) -> int:
    return int(doc.get(name) or 0)


def key_value(doc: Dict[str, Any]) -> KeyValue:
    """A KeyValue from the gateway's JSON (missing fields are zero or empty)."""
    return KeyValue(unb64(doc.get("key")), unb64(doc.get("value")), _int(doc, "create_revision"),
                    _int(doc, "mod_revision"), _int(doc, "version"), _int(doc, "lease"))


# ---- the parts of a transaction (POST /v3/kv/txn), as the gateway spells them ----

def compare_create_revision(key: bytes, revision: int, range_end: Optional[bytes] = None) -> Dict[str, Any]:
    """True when key's create revision equals revision (0: the key does not exist). With range_end, every key
    in [key, range_end) must match, and an empty range matches 0."""
    compare = {"target": "CREATE", "result": "EQUAL", "key": b64(key), "create_revision": str(revision)}
    if range_end is not None:
        compare["range_end"] = b64(range_end)
    return compare


def compare_mod_revision(key: bytes, revision: int) -> Dict[str, Any]:
    """True when key was last modified at revision: a compare-and-swap's guard."""
    return {"target": "MOD", "result": "EQUAL", "key": b64(key), "mod_revision": str(revision)}


def compare_value(key: bytes, value: bytes) -> Dict[str, Any]:
    """True when key exists and holds value."""
    return {"target": "VALUE", "result": "EQUAL", "key": b64(key), "value": b64(value)}


def op_put(key: bytes, value: bytes, lease: int = 0) -> Dict[str, Any]:
    put: Dict[str, Any] = {"key": b64(key), "value": b64(value)}
    if lease:
        put["lease"] = str(lease)
    return {"request_put": put}


def op_range(key: bytes, range_end: Optional[bytes] = None) -> Dict[str, Any]:
    request = {"key": b64(key)}
    if range_end is not None:
        request["range_end"] = b64(range_end)
    return {"request_range": request}


def op_delete(key: bytes, range_end: Optional[bytes] = None) -> Dict[str, Any]:
    request = {"key": b64(key)}
    if range_end is not None:
        request["range_end"] = b64(range_end)
    return {"request_delete_range": request}


def response_kvs(response: Dict[str, Any]) -> List[KeyValue]:
    """The keys of one response of a transaction that was an op_range."""
    return [key_value(kv) for kv in response.get("response_range", {}).get("kvs", [])]


class EtcdClient:
    """Calls to one etcd cluster. Thread-safe: the keep-alive thread and torch's threads share one client."""

    def __init__(self, options: EtcdOptions) -> None:
        self.options = options
        self._lock = threading.Lock()
        self._preferred = 0  # index of the member that answered last
        self._token: Optional[str] = None
        self._ssl: Optional[ssl.SSLContext] = None
        if options.tls:
            self._ssl = ssl.create_default_context(cafile=options.ca_cert)
            if options.cert:
                self._ssl.load_cert_chain(options.cert, options.key)

    # ---- key-value ----

    def range(self, key: bytes, range_end: Optional[bytes] = None, count_only: bool = False
              ) -> Tuple[List[KeyValue], int, int]:
        """(keys, count, the cluster's revision) for key or [key, range_end)."""
        body: Dict[str, Any] = {"key": b64(key)}
        if range_end is not None:
            body["range_end"] = b64(range_end)
        if count_only:
            body["count_only"] = True
        doc = self.call("/v3/kv/range", body)
        kvs = [key_value(kv) for kv in doc.get("kvs", [])]
        return kvs, _int(doc, "count"), _int(doc.get("header", {}), "revision")

    def get(self, key: bytes) -> Optional[KeyValue]:
        kvs, _, _ = self.range(key)
        return kvs[0] if kvs else None

    def put(self, key: bytes, value: bytes, lease: int = 0) -> int:
        """The revision of the write."""
        body: Dict[str, Any] = {"key": b64(key), "value": b64(value)}
        if lease:
            body["lease"] = str(lease)
        return _int(self.call("/v3/kv/put", body).get("header", {}), "revision")

    def delete(self, key: bytes, range_end: Optional[bytes] = None) -> int:
        """How many keys were deleted."""
        body = {"key": b64(key)}
        if range_end is not None:
            body["range_end"] = b64(range_end)
        return _int(self.call("/v3/kv/deleterange", body), "deleted")

    def txn(self, compare: List[Dict[str, Any]], success: List[Dict[str, Any]],
            failure: List[Dict[str, Any]]) -> Tuple[bool, List[Dict[str, Any]], int]:
        """(succeeded, the responses of the branch taken, the revision after it)."""
        doc = self.call("/v3/kv/txn", {"compare": compare, "success": success, "failure": failure})
        return bool(doc.get("succeeded")), doc.get("responses", []), _int(doc.get("header", {}), "revision")

    # ---- leases ----

    def grant(self, ttl_s: int) -> int:
        """A new lease's id."""
        doc = self.call("/v3/lease/grant", {"TTL": str(ttl_s)})
        if doc.get("error"):
            raise EtcdRequestError("/v3/lease/grant", 200, None, str(doc["error"]))
        return _int(doc, "ID")

    def keep_alive(self, lease: int, timeout_s: Optional[float] = None) -> int:
        """Renews the lease; its TTL in seconds, 0 when it no longer exists (expired or revoked)."""
        doc = self.call("/v3/lease/keepalive", {"ID": str(lease)}, timeout_s)
        return _int(doc.get("result", doc), "TTL")

    def revoke(self, lease: int) -> bool:
        """Revokes the lease, deleting its keys; False when it no longer existed."""
        try:
            self.call("/v3/lease/revoke", {"ID": str(lease)})
            return True
        except EtcdRequestError as e:
            if e.lease_not_found:
                return False
            raise

    # ---- watch ----

    def watch_once(self, key: bytes, range_end: bytes, start_revision: int, timeout_s: float) -> str:
        """Waits for a change in [key, range_end) at or after start_revision, at most timeout_s.

        Returns 'changed', 'timeout', or 'unsure' (the watch could not be kept: the caller looks again,
        and a member that is down is skipped by its next call). One HTTP stream per call: POST /v3/watch
        answers with a line per message, first {"created": true}, then the events.
        """
        with self._lock:
            index = self._preferred
            token = self._token
        endpoint = self.options.endpoints[index]
        body = {"create_request": {"key": b64(key), "range_end": b64(range_end),
                                   "start_revision": str(start_revision)}}
        try:
            conn = self._connection(endpoint, min(MEMBER_TIMEOUT_S, max(timeout_s, 0.05)))
        except OSError:
            return "unsure"
        try:
            conn.request("POST", "/v3/watch", body=json.dumps(body), headers=self._headers(token))
            response = conn.getresponse()
            if response.status != 200:
                return "unsure"
            if conn.sock is not None:
                conn.sock.settimeout(max(timeout_s, 0.05))
            while True:
                line = response.readline()
                if not line:
                    return "unsure"
                if not line.strip():
                    continue
                result = json.loads(line).get("result")
                if not isinstance(result, dict) or result.get("canceled"):
                    return "unsure"  # e.g. an error, or canceled (compacted, not permitted)
                if result.get("events") or result.get("compact_revision"):
                    return "changed"
        except socket.timeout:
            return "timeout"
        except (OSError, http.client.HTTPException, ValueError):
            return "unsure"
        finally:
            conn.close()

    # ---- the call: failover between members, auth ----

    def call(self, path: str, body: Dict[str, Any], timeout_s: Optional[float] = None) -> Dict[str, Any]:
        """POST body to path on some member; its JSON answer. Raises EtcdUnavailableError when no member
        answered within timeout_s (default: read_timeout), EtcdRequestError when the cluster refused."""
        deadline = time.monotonic() + (self.options.read_timeout_s if timeout_s is None else timeout_s)
        members = self.options.endpoints
        failures: Dict[str, str] = {}
        pause = 0.05
        reauthenticated = False
        while True:
            with self._lock:
                first = self._preferred
            for step in range(len(members)):
                index = (first + step) % len(members)
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                endpoint = members[index]
                try:
                    token = self._token_for(endpoint, min(MEMBER_TIMEOUT_S, remaining))
                    doc = self._post(endpoint, path, body, token, min(MEMBER_TIMEOUT_S, remaining))
                except _MemberDown as e:
                    failures[endpoint.netloc()] = str(e)
                    continue
                except _TokenRejected:
                    if reauthenticated:
                        raise EtcdRequestError(path, 401, GRPC_UNAUTHENTICATED,
                                               "the auth token was refused just after authenticating") from None
                    reauthenticated = True
                    with self._lock:
                        if self._token == token:
                            self._token = None
                    failures[endpoint.netloc()] = "auth token expired"
                    break  # authenticate again, same member first
                with self._lock:
                    self._preferred = index
                return doc
            else:
                # A whole pass failed: pause (with jitter, so agents do not hammer in step), then again.
                remaining = deadline - time.monotonic()
                if remaining > 0:
                    time.sleep(min(remaining, pause * random.uniform(0.5, 1.5)))
                    pause = min(pause * 2, 1.0)
            if time.monotonic() >= deadline:
                detail = "; ".join(f"{member}: {why}" for member, why in failures.items()) or "no time left"
                raise EtcdUnavailableError(f"no etcd member answered {path} within "
                                           f"{self.options.read_timeout_s if timeout_s is None else timeout_s:g} s "
                                           f"(endpoints {self.options.describe()}): {detail}")

    def _token_for(self, endpoint: Endpoint, timeout_s: float) -> Optional[str]:
        if not self.options.username:
            return None
        with self._lock:
            if self._token is not None:
                return self._token
        doc = self._post(endpoint, "/v3/auth/authenticate",
                         {"name": self.options.username, "password": self.options.password or ""}, None, timeout_s)
        token = doc.get("token")
        if not token:
            raise EtcdRequestError("/v3/auth/authenticate", 200, None, "etcd returned no token")
        with self._lock:
            self._token = token
        return token

    def _headers(self, token: Optional[str]) -> Dict[str, str]:
        headers = {"Content-Type": "application/json"}
        if token:  # never send an empty or stale-looking header: etcd waits on a token's index
            headers["Authorization"] = token
        return headers

    def _connection(self, endpoint: Endpoint, timeout_s: float) -> http.client.HTTPConnection:
        if self._ssl is not None:
            conn: http.client.HTTPConnection = http.client.HTTPSConnection(
                endpoint.host, endpoint.port, timeout=timeout_s, context=self._ssl)
        else:
            conn = http.client.HTTPConnection(endpoint.host, endpoint.port, timeout=timeout_s)
        conn.connect()
        return conn

    def _post(self, endpoint: Endpoint, path: str, body: Dict[str, Any], token: Optional[str],
              timeout_s: float) -> Dict[str, Any]:
        try:
            conn = self._connection(endpoint, timeout_s)
            try:
                conn.request("POST", path, body=json.dumps(body), headers=self._headers(token))
                response = conn.getresponse()
                status, data = response.status, response.read()
            finally:
                conn.close()
        except ssl.SSLCertVerificationError as e:
            # Not a member being down: every member would be refused the same way.
            trusted = self.options.ca_cert or "the system's CAs"
            raise EtcdRequestError(path, 0, None, f"TLS: the certificate of {endpoint.netloc()} was not accepted: "
                                                  f"{e.verify_message or e} (trusted: {trusted})") from None
        except (OSError, http.client.HTTPException) as e:
            raise _MemberDown(f"{type(e).__name__}: {e}") from None
        try:
            doc = json.loads(data) if data.strip() else {}
        except ValueError:
            doc = None
        if status == 200 and isinstance(doc, dict) and not isinstance(doc.get("error"), dict):
            return doc
        code, message = None, data.decode("utf-8", "replace").strip()[:200]
        if isinstance(doc, dict):
            error = doc.get("error")
            if isinstance(error, dict):  # a stream's error: {"error": {"grpc_code", "http_code", "message"}}
                code, message = error.get("grpc_code"), str(error.get("message", message))
            else:
                code, message = doc.get("code"), str(doc.get("message") or error or message)
        if code == GRPC_UNAUTHENTICATED and token is not None:
            raise _TokenRejected()
        if "CommonName of client sending a request against gateway" in message:
            message += (" (etcd's JSON gateway, with --client-cert-auth and auth both on, takes only a client "
                        "certificate without a Common Name: the user is the username and password)")
        if status >= 500 or code in _TRY_ANOTHER_MEMBER:
            raise _MemberDown(f"{message} (HTTP {status})")
        raise EtcdRequestError(path, status, code, message)
