"""Looks into the etcd cluster of tests/cluster/torchrun_etcd_test.sh, through meshrun_torchrun's own client
(run it on a node, with the test's PYTHONPATH). Prints one line; exits 1 when the question's answer is no.
  keys ENDPOINTS PREFIX              how many keys start with PREFIX
  heartbeats ENDPOINTS RUN_ID EPOCH  every participant of the rendezvous state of RUN_ID (default prefix)
                                     heartbeat after EPOCH (seconds since 1970)? (unpickles torch's state)
  lead ENDPOINTS INDEX               makes member INDEX (0-based, in ENDPOINTS order) the leader; prints
                                     which member leads afterwards
"""
import datetime
import pickle
import sys
import time

from meshrun_torchrun.etcd_client import EtcdClient
from meshrun_torchrun.options import options_from, prefix_end, run_prefix


def client(endpoints, **conf):
    return EtcdClient(options_from(endpoints, {"read_timeout": "10", **conf}))


def keys(endpoints, prefix):
    _, count, _ = client(endpoints).range(prefix.encode(), prefix_end(prefix.encode()), count_only=True)
    print(count)
    return 0


def heartbeats(endpoints, run_id, epoch):
    c = client(endpoints)
    kv = c.get((run_prefix(c.options.prefix, run_id) + "state").encode())
    if kv is None:
        print("no state")
        return 1
    state = pickle.loads(kv.value)  # torch's _RendezvousState
    since = datetime.datetime.fromtimestamp(float(epoch), datetime.timezone.utc)
    beats = {str(node): state.last_heartbeats.get(node) for node in state.participants}
    late = [node for node, beat in beats.items() if beat is None or beat <= since]
    print(f"round {state.round}, {len(beats)} participants, "
          + ("every one beat since" if not late else f"not beaten since: {late}"))
    return 0 if beats and not late else 1


def member_status(c, endpoint):
    return c._post(endpoint, "/v3/maintenance/status", {}, None, 5.0)


def lead(endpoints, index):
    c = client(endpoints)
    members = c.options.endpoints
    ids = [member_status(c, m)["header"]["member_id"] for m in members]
    target = ids[int(index)]
    for _ in range(50):
        leader = member_status(c, members[0])["leader"]
        if leader == target:
            print(f"member {index} ({members[int(index)].netloc()}) leads")
            return 0
        if leader in ids:
            c._post(members[ids.index(leader)], "/v3/maintenance/transfer-leadership", {"targetID": target}, None, 5.0)
        time.sleep(0.2)
    print(f"member {index} did not become the leader")
    return 1


if __name__ == "__main__":
    command, args = sys.argv[1], sys.argv[2:]
    sys.exit({"keys": keys, "heartbeats": heartbeats, "lead": lead}[command](*args))
