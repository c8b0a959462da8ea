"""One agent's part in one run: the run's keys in etcd, their leases, and who removes them.

Every key of a run is under '<etcd_prefix>/<run id>/':

  lease             the run lease's id; the key is itself on the run lease (create-if-absent: the first
                    agent's lease wins, later agents renew that one)
  state             torch's rendezvous state (rendezvous_backend.py), on the run lease
  store/<key>       the agents' store (store.py), on the run lease
  agents/<lease>    one per live agent (host, pid), on that agent's own lease

Leases: every agent renews the run lease and its own, every lease_ttl/3 s, from a daemon thread. So the
run's keys live while any agent of the run lives, and etcd deletes them lease_ttl s after the last one
stopped renewing (killed, host lost): a dead run leaves nothing behind. An agent's own key goes with its
lease: the agents/ range is who is still in the run.

The end: when torch closes the rendezvous (the job ended, well or not) each agent revokes its own lease,
and one transaction deletes the whole prefix if no agents/ key is left: the last agent out removes the run.
An agent ended by a signal revokes its own lease only (torch keeps such a rendezvous open for a restart).
"""
from __future__ import annotations

import atexit
import json
import logging
import os
import socket
import threading
import time
import weakref
from typing import Optional

from .etcd_client import (EtcdClient, EtcdError, EtcdRequestError, compare_create_revision, op_delete,
                          op_put, op_range, response_kvs)
from .options import prefix_end, run_prefix

logger = logging.getLogger(__name__)

_ACQUIRE_TRIES = 8


class RunSession:
    """The run's key names and leases for one agent. Thread-safe."""

    def __init__(self, client: EtcdClient, run_id: str) -> None:
        self.client = client
        self.run_id = run_id
        self.prefix = run_prefix(client.options.prefix, run_id).encode()
        self.state_key = self.prefix + b"state"
        self.store_prefix = self.prefix + b"store/"
        self.lease_key = self.prefix + b"lease"
        self.agents_prefix = self.prefix + b"agents/"
        self.ttl_s = client.options.lease_ttl_s
        self._lock = threading.Lock()
        self._run_lease = 0
        self._agent_lease = 0
        self._agent_key = b""
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._closed = False

    # ---- start ----

    def start(self) -> None:
        """Registers this agent in the run and joins the run lease; starts renewing both."""
        self._register_agent()
        self.run_lease()
        self._thread = threading.Thread(target=self._keep_alive_loop, name="meshrun-etcd-v3-leases", daemon=True)
        self._thread.start()
        # Interpreter exit without torch's shutdown (a signal, an exception): leave the run, keep its keys.
        atexit.register(_close_at_exit, weakref.ref(self))

    def _register_agent(self) -> None:
        lease = self.client.grant(self.ttl_s)
        key = self.agents_prefix + f"{lease:x}".encode()
        self.client.put(key, json.dumps({"host": socket.gethostname(), "pid": os.getpid()}).encode(), lease)
        with self._lock:
            self._agent_lease, self._agent_key = lease, key

    def run_lease(self) -> int:
        """The run lease's id (joined or created on first use, and again after it expired)."""
        with self._lock:
            if self._run_lease:
                return self._run_lease
            for _ in range(_ACQUIRE_TRIES):
                mine = self.client.grant(self.ttl_s)
                created, responses, _ = self.client.txn(
                    [compare_create_revision(self.lease_key, 0)],
                    [op_put(self.lease_key, str(mine).encode(), mine)],
                    [op_range(self.lease_key)])
                if created:
                    self._run_lease = mine
                    return mine
                self.client.revoke(mine)
                kvs = response_kvs(responses[0]) if responses else []
                # The key lives exactly as long as its lease: a renewal that finds it alive joins the run.
                if kvs and kvs[0].lease and self.client.keep_alive(kvs[0].lease) > 0:
                    self._run_lease = kvs[0].lease
                    return self._run_lease
            raise EtcdError(f"could not create or join the lease of run '{self.run_id}' "
                            f"in {_ACQUIRE_TRIES} tries (keys under {self.prefix.decode()})")

    def with_run_lease(self, write):
        """write(lease) with the run lease; once more with a new one when etcd says that lease is gone."""
        lease = self.run_lease()
        try:
            return write(lease)
        except EtcdRequestError as e:
            if not e.lease_not_found:
                raise
            self._forget_run_lease(lease)
            return write(self.run_lease())

    def _forget_run_lease(self, lease: int) -> None:
        with self._lock:
            if self._run_lease == lease:
                self._run_lease = 0
        logger.warning("etcd-v3: the lease of run '%s' expired (no agent renewed it for %d s): its keys are gone, "
                       "the rendezvous starts afresh", self.run_id, self.ttl_s)

    # ---- renewing ----

    def _keep_alive_loop(self) -> None:
        period = max(self.ttl_s / 3.0, 0.5)
        warned_at = 0.0
        while not self._stop.wait(period):
            try:
                self._renew_once(timeout_s=period)
            except EtcdError as e:
                if time.monotonic() - warned_at > 30:  # one line per 30 s while etcd is away
                    warned_at = time.monotonic()
                    logger.warning("etcd-v3: could not renew the leases of run '%s': %s", self.run_id, e)

    def _renew_once(self, timeout_s: float) -> None:
        with self._lock:
            agent, run = self._agent_lease, self._run_lease
        if agent and self.client.keep_alive(agent, timeout_s) == 0:
            # Gone (etcd was out of reach longer than the TTL): register again.
            if self._stop.is_set():
                return
            self._register_agent()
        if run and self.client.keep_alive(run, timeout_s) == 0:
            self._forget_run_lease(run)

    # ---- the end ----

    def close(self, run_ended: bool) -> bool:
        """Stops renewing and leaves the run (revokes this agent's lease). With run_ended (torch closed the
        rendezvous), the last agent out deletes every key of the run. True when this call deleted them."""
        with self._lock:
            if self._closed:
                return False
            self._closed = True
            agent = self._agent_lease
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=self.client.options.read_timeout_s)
        try:
            if agent:
                self.client.revoke(agent)
            if not run_ended:
                return False
            removed, _, _ = self.client.txn(
                [compare_create_revision(self.agents_prefix, 0, prefix_end(self.agents_prefix))],
                [op_delete(self.prefix, prefix_end(self.prefix))], [])
            if removed:
                with self._lock:
                    run, self._run_lease = self._run_lease, 0
                if run:
                    self.client.revoke(run)
                logger.info("etcd-v3: run '%s' ended; its keys are deleted", self.run_id)
            return removed
        except EtcdError as e:
            logger.warning("etcd-v3: could not leave run '%s' cleanly (%s): its keys go when their lease "
                           "expires, %d s after the last agent", self.run_id, e, self.ttl_s)
            return False


def _close_at_exit(session_ref) -> None:
    session = session_ref()
    if session is not None:
        session.close(run_ended=False)
