"""torch's Store for the agents of a run, on etcd v3: every key at <prefix>/<run id>/store/<key>.

Who uses it: torch's agents (torch.distributed.elastic.agent.server.api), through the PrefixStore that the
dynamic rendezvous puts in front of it per round: the rank-0 agent's MASTER_ADDR/MASTER_PORT, the workers'
rank assignment (set, get, and multi_get/multi_set, which torch turns into gets and sets), and the exit
barrier (add, wait). The workers never use it: torch hands them a TCPStore (handler.py says which).

Semantics are TCPStore's: get and wait block until the keys exist or the store's timeout passes (then
DistStoreError); add treats a missing key as 0 and stores decimal text; compare_set on a missing key sets it
only when the expected value is empty. Waits are watches on the store/ range from the revision just read,
so no write between the read and the watch is missed; writes are compare-and-swap on the mod revision.
"""
from __future__ import annotations

import random
import time
from datetime import timedelta
from typing import Dict, List, Optional, Tuple, Union

import torch.distributed as dist

from .etcd_client import (EtcdError, compare_create_revision, compare_mod_revision, op_put, op_range,
                          response_kvs)
from .options import prefix_end
from .run_session import RunSession

_WATCH_SLICE_S = 5.0  # a watch is re-opened this often: the keys are read again in between
_MAX_TXN_RANGES = 64  # etcd's default --max-txn-ops is 128

KeyLike = Union[str, bytes]


def _bytes(value: KeyLike) -> bytes:
    return value.encode("utf-8") if isinstance(value, str) else bytes(value)


class EtcdV3Store(dist.Store):
    """The agents' store of one run. Keep a reference to it for as long as torch may call it (torch holds
    the C++ side only; the Python methods live with this object)."""

    def __init__(self, session: RunSession, timeout: Optional[timedelta] = None) -> None:
        super().__init__()  # the pybind trampoline
        self._session = session
        self._client = session.client
        self._prefix = session.store_prefix
        if timeout is not None:
            self.set_timeout(timeout)

    def _key(self, key: KeyLike) -> bytes:
        return self._prefix + _bytes(key)

    def set(self, key: KeyLike, value: KeyLike) -> None:
        etcd_key, data = self._key(key), _bytes(value)
        self._guard(lambda: self._session.with_run_lease(lambda lease: self._client.put(etcd_key, data, lease)), key)

    def get(self, key: KeyLike) -> bytes:
        return self._wait_for([key], self.timeout)[0]

    def add(self, key: KeyLike, amount: int) -> int:
        etcd_key = self._key(key)

        def attempt(lease: int) -> Optional[int]:
            kv = self._client.get(etcd_key)
            if kv is None:
                guard, value = compare_create_revision(etcd_key, 0), amount
            else:
                guard, value = compare_mod_revision(etcd_key, kv.mod_revision), int(kv.value or b"0") + amount
            done, _, _ = self._client.txn([guard], [op_put(etcd_key, str(value).encode(), lease)], [])
            return value if done else None

        while True:
            value = self._guard(lambda: self._session.with_run_lease(attempt), key)
            if value is not None:
                return value
            time.sleep(random.uniform(0, 0.02))  # another agent added first: read again

    def compare_set(self, key: KeyLike, expected_value: KeyLike, desired_value: KeyLike) -> bytes:
        etcd_key, expected, desired = self._key(key), _bytes(expected_value), _bytes(desired_value)

        def attempt(lease: int) -> Tuple[bool, bytes]:
            kv = self._client.get(etcd_key)
            if kv is None:
                if expected:
                    return True, expected  # TCPStore answers a missing key with the expected value
                guard = compare_create_revision(etcd_key, 0)
            elif kv.value != expected:
                return True, kv.value
            else:
                guard = compare_mod_revision(etcd_key, kv.mod_revision)
            done, _, _ = self._client.txn([guard], [op_put(etcd_key, desired, lease)], [])
            return done, desired

        while True:
            done, value = self._guard(lambda: self._session.with_run_lease(attempt), key)
            if done:
                return value

    def check(self, keys: List[KeyLike]) -> bool:
        found, _ = self._guard(lambda: self._read(keys), keys)
        return all(value is not None for value in found)

    def wait(self, keys: List[KeyLike], timeout: Optional[timedelta] = None) -> None:
        self._wait_for(keys, self.timeout if timeout is None else timeout)

    def delete_key(self, key: KeyLike) -> bool:
        return self._guard(lambda: self._client.delete(self._key(key)), key) > 0

    def num_keys(self) -> int:
        _, count, _ = self._guard(lambda: self._client.range(self._prefix, prefix_end(self._prefix), count_only=True),
                                  "*")
        return count

    # ---- reading and waiting ----

    def _read(self, keys: List[KeyLike]) -> Tuple[List[Optional[bytes]], int]:
        """Each key's value (None: missing), and the lowest revision the reads saw."""
        values: List[Optional[bytes]] = []
        revision = 0
        for start in range(0, len(keys), _MAX_TXN_RANGES):
            chunk = keys[start:start + _MAX_TXN_RANGES]
            _, responses, seen = self._client.txn([], [op_range(self._key(k)) for k in chunk], [])
            revision = seen if not revision else min(revision, seen)
            for response in responses:
                kvs = response_kvs(response)
                values.append(kvs[0].value if kvs else None)
        return values, revision

    def _wait_for(self, keys: List[KeyLike], timeout: timedelta) -> List[bytes]:
        deadline = time.monotonic() + timeout.total_seconds()
        end = prefix_end(self._prefix)
        while True:
            values, revision = self._guard(lambda: self._read(keys), keys)
            if all(value is not None for value in values):
                return values  # type: ignore[return-value]
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                missing = [k for k, v in zip(keys, values) if v is None]
                raise dist.DistStoreError(f"etcd-v3 store: waited {timeout.total_seconds():g} s for {missing} "
                                          f"(run '{self._session.run_id}')")
            outcome = self._client.watch_once(self._prefix, end, revision + 1, min(remaining, _WATCH_SLICE_S))
            if outcome == "unsure":
                time.sleep(min(0.2, max(remaining, 0)))

    def _guard(self, call, keys):
        """call() with etcd's errors as the store errors torch expects (DistStoreError names the keys)."""
        try:
            return call()
        except EtcdError as e:
            raise dist.DistStoreError(f"etcd-v3 store: {keys}: {e}") from e
