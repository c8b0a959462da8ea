"""The handler `torchrun --rdzv-backend etcd-v3` gets: torch's own dynamic rendezvous (the one behind its c10d
and etcd-v2 backends, with all of their --rdzv-conf keys) over the etcd v3 state backend and store of this
package, and two things torch's handler does not do:

  - the end: shutdown() (torch calls it when the job ends, well or not) also removes this agent from the run,
    and the last agent out deletes the run's keys (run_session.py);
  - a fresh store for the workers in every round. Workers do not use the etcd store: torch gives them a
    TCPStore served by the agent of node rank 0 (MASTER_ADDR/MASTER_PORT, TORCHELASTIC_USE_AGENT_STORE=True)
    and, in torch 2.15, do not prefix their keys per attempt, counting on "a new TCPStore for every retry"
    (torch/distributed/rendezvous.py). torch's handler builds that server once, in the first round, and
    hands the same address to every later round: a restarted attempt reads the Gloo addresses the failed
    one left (docs/daemon.md, "torchrun's own agent"), and when node rank 0 is lost the survivors are sent
    to a store that is gone. Here, the handler's cached server and address are dropped before every round,
    so node rank 0 of each round serves a new server and publishes it in that round's keys. (When a torch
    version lacks those two attributes, torch's own behaviour is kept.)
"""
from __future__ import annotations

import logging

from torch.distributed.elastic.rendezvous.api import (RendezvousConnectionError, RendezvousHandler,
                                                      RendezvousInfo, RendezvousParameters)
from torch.distributed.elastic.rendezvous.dynamic_rendezvous import create_handler as create_dynamic_handler

from .etcd_client import EtcdClient, EtcdError
from .options import options_from
from .rendezvous_backend import BACKEND_NAME, EtcdV3RendezvousBackend
from .run_session import RunSession
from .store import EtcdV3Store

logger = logging.getLogger(__name__)

# torch's DynamicRendezvousHandler keeps the workers' store server and its address in these (torch 2.15).
_CACHED_STORE_ATTRIBUTES = ("_bootstrap_store_info", "_shared_tcp_store_server")


class EtcdV3RendezvousHandler(RendezvousHandler):
    """torch's dynamic rendezvous handler, with this run's etcd session and store kept alive beside it."""

    def __init__(self, inner: RendezvousHandler, session: RunSession, store: EtcdV3Store) -> None:
        self._inner = inner
        self._session = session
        self._store = store  # torch holds only the C++ side of a Python store
        self._fresh_store_per_round = all(hasattr(inner, a) for a in _CACHED_STORE_ATTRIBUTES)
        if not self._fresh_store_per_round:
            logger.warning("etcd-v3: this torch's handler has no %s: every round reuses the first round's "
                           "workers' store, as with torch's own backends", " or ".join(_CACHED_STORE_ATTRIBUTES))

    def get_backend(self) -> str:
        return BACKEND_NAME

    @property
    def use_agent_store(self) -> bool:
        return self._inner.use_agent_store

    def next_rendezvous(self) -> RendezvousInfo:
        if self._fresh_store_per_round:
            for attribute in _CACHED_STORE_ATTRIBUTES:
                setattr(self._inner, attribute, None)
        return self._inner.next_rendezvous()

    def is_closed(self) -> bool:
        return self._inner.is_closed()

    def set_closed(self) -> None:
        self._inner.set_closed()

    def num_nodes_waiting(self) -> int:
        return self._inner.num_nodes_waiting()

    def get_run_id(self) -> str:
        return self._inner.get_run_id()

    def shutdown(self) -> bool:
        try:
            return self._inner.shutdown()
        finally:
            self._session.close(run_ended=True)

    def __getattr__(self, name: str):
        # Anything else torch reads from its handler (settings, ...) is the inner handler's.
        if name == "_inner":
            raise AttributeError(name)
        return getattr(self._inner, name)


def create_handler(params: RendezvousParameters) -> EtcdV3RendezvousHandler:
    """The handler for one torchrun agent, from its --rdzv-endpoint, --rdzv-id and --rdzv-conf."""
    options = options_from(params.endpoint, params.config)
    session = RunSession(EtcdClient(options), params.run_id)
    try:
        session.start()
    except EtcdError as e:
        raise RendezvousConnectionError(f"etcd-v3: cannot join run '{params.run_id}' at etcd "
                                        f"{options.describe()}: {e}") from e
    backend = EtcdV3RendezvousBackend(session)
    store = EtcdV3Store(session)
    try:
        inner = create_dynamic_handler(store, backend, params)
    except Exception:
        session.close(run_ended=False)
        raise
    return EtcdV3RendezvousHandler(inner, session, store)
