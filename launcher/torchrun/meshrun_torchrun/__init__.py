"""meshrun's etcd v3 rendezvous for PyTorch's own launcher: `torchrun --rdzv-backend etcd-v3`.

torch finds it through the `torchrun.handlers` entry point that meshrun's wheel declares (plugin.py). The
rendezvous itself is torch's dynamic rendezvous; this package gives it what it needs from etcd's v3 API,
spoken through etcd's JSON gateway with the standard library only (docs/etcd.md, "torchrun with etcd-v3"):

  options           the --rdzv-endpoint list and the --rdzv-conf keys (pure)
  etcd_client       the v3 JSON gateway: kv, txn, leases, watch, auth, TLS, failover between members
  run_session       one agent's part in a run: the run's keys under one prefix, its leases, their keep-alive
  rendezvous_backend torch's RendezvousBackend: the state key, compare-and-swap on its mod revision
  store             torch's Store for the agents: keys under the run's prefix, waits by watch
  handler           the handler torchrun gets: torch's dynamic rendezvous over the two above
  plugin            what the entry point names (imports no torch)
"""
