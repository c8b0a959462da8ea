"""torch's RendezvousBackend on etcd v3: the state of torch's dynamic rendezvous in one key.

The fencing token is the state key's mod revision. set_state(state, token) is one transaction:
  token None   put if the key does not exist (create revision 0)
  token N      put if the key's mod revision is still N
and on failure the same transaction reads the key back, so a node that lost the race gets the winner's
state and token in the same round trip, as torch's contract asks. The key is on the run lease
(run_session.py): written by any agent, renewed by every agent.
"""
from __future__ import annotations

from typing import Optional, Tuple

from torch.distributed.elastic.rendezvous.api import RendezvousConnectionError
from torch.distributed.elastic.rendezvous.dynamic_rendezvous import RendezvousBackend

from .etcd_client import (EtcdError, EtcdRequestError, compare_create_revision, compare_mod_revision, op_put,
                          op_range, response_kvs)
from .run_session import RunSession

BACKEND_NAME = "etcd-v3"


class EtcdV3RendezvousBackend(RendezvousBackend):
    """The rendezvous state of one run, at <prefix>/<run id>/state."""

    def __init__(self, session: RunSession) -> None:
        self._session = session
        self._client = session.client

    @property
    def name(self) -> str:
        return BACKEND_NAME

    def get_state(self) -> Optional[Tuple[bytes, int]]:
        try:
            kv = self._client.get(self._session.state_key)
        except EtcdError as e:
            raise RendezvousConnectionError(f"etcd-v3: reading the rendezvous state failed: {e}") from e
        return None if kv is None else (kv.value, kv.mod_revision)

    def set_state(self, state: bytes, token: Optional[object] = None) -> Optional[Tuple[bytes, int, bool]]:
        key = self._session.state_key
        if token is None:
            guard = compare_create_revision(key, 0)
        else:
            try:
                guard = compare_mod_revision(key, int(token))
            except (TypeError, ValueError):
                return self._current()  # not a token of ours: nothing can match it
        try:
            succeeded, responses, revision = self._session.with_run_lease(
                lambda lease: self._client.txn([guard], [op_put(key, state, lease)], [op_range(key)]))
        except EtcdRequestError as e:
            raise RendezvousConnectionError(f"etcd-v3: etcd refused the rendezvous state: {e}") from e
        except EtcdError as e:
            raise RendezvousConnectionError(f"etcd-v3: writing the rendezvous state failed: {e}") from e
        if succeeded:
            return state, revision, True  # the put is the transaction's only write: its revision is the key's
        kvs = response_kvs(responses[0]) if responses else []
        if not kvs:
            return None  # the key is gone (its lease expired): torch starts from a fresh state
        return kvs[0].value, kvs[0].mod_revision, False

    def _current(self) -> Optional[Tuple[bytes, int, bool]]:
        current = self.get_state()
        return None if current is None else (current[0], current[1], False)
