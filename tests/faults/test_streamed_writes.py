"""Large writes go out in pieces (a set_multi or delete_multi of 2,048 keys or more): each piece
is queued on its servers' connections while the next is encoded. The pieces must add up to the
one call they replace: every quiet failure on its own key, one request per server in the
metrics, and a dead server (tried once), a lost connection or a server error in a late piece
failing the call as the same fault does in a call of one piece."""

import fastmc
from fakes import FakeMemcached
from memcached import free_port

N = 6000  # three pieces: 1,024 keys, 2,048, then the rest


def test_quiet_failures_in_late_pieces_name_their_own_keys(servers):
    mc = fastmc.Client(servers)
    keys = ["sw-add-%05d" % i for i in range(N)]
    taken = keys[1::3] + keys[-5:]  # in every piece, the last one's end too
    assert mc.set_multi({k: b"old" for k in taken}) == []
    assert sorted(mc.add_multi({k: b"new" for k in keys})) == sorted(set(taken))
    got = mc.get_multi(keys)
    assert all(got[k] == (b"old" if k in set(taken) else b"new") for k in keys)
    assert mc.delete_multi(keys) is True
    assert mc.delete_multi(keys) is False  # every key missing: answered, not assumed
    assert mc.get_multi(keys) == {}


def test_one_request_per_server_as_before(servers):
    mc = fastmc.Client(servers)
    data = {"sw-m-%05d" % i: b"v" * 20 for i in range(N)}
    # A first batch probes each server for the meta protocol; then writes are quiet.
    assert mc.set_multi({"sw-probe-%d" % i: 0 for i in range(30)}) == []
    before = mc.metrics()
    assert mc.set_multi(data) == []
    after = mc.metrics()
    assert sum(after[s]["requests"]["store"] - before[s]["requests"]["store"] for s in servers) == 3
    assert sum(after[s]["keys"]["store"] - before[s]["keys"]["store"] for s in servers) == N
    # Every byte of every piece is counted once: a request per key, and a no-op per piece.
    sent = sum(after[s]["bytes_sent"] - before[s]["bytes_sent"] for s in servers)
    per_key = sum(len("ms %s 20 q\r\n" % k) + 22 for k in data)
    noops = sent - per_key
    assert noops % 4 == 0 and 3 <= noops // 4 <= 3 * 3  # an `mn` per piece and server


def outcome(call, *args):
    """What a call returned, or the class of what it raised."""
    try:
        return call(*args)
    except fastmc.Error as e:
        return type(e)


def test_a_dead_server_is_tried_once_and_fails_the_call_as_one_batch_would(servers):
    dead = "127.0.0.1:%d" % free_port()
    addrs = [servers[0], dead, servers[1]]
    small = {"sw-d-%05d" % i: i for i in range(1500)}  # one piece
    data = {"sw-d-%05d" % i: i for i in range(N)}
    expected = outcome(fastmc.Client(addrs).set_multi, small)
    assert expected is fastmc.ConnectionError
    mc = fastmc.Client(addrs, behaviors={"retry_timeout": 30})
    assert outcome(mc.set_multi, data) is expected
    m = mc.metrics()[dead]
    assert m["connections_opened"] == 0
    assert sum(m["errors"].values()) == 1  # one connect, failed once for the whole call
    live = [k for k in data if mc.hash(k) != 1]
    assert 0 < len(live) < N
    assert mc.get_multi(live) == {k: data[k] for k in live}


def fault_in_one_piece_and_in_a_late_one(rule, stored):
    """A set_multi with `rule` on one key, in a call of one piece (1,500 keys, the fault at key
    700) and in the last of three (6,000 keys, at key 5,000): what each call raised, and
    how many keys the fake holds after it against `stored(n, at)`. A new client per call."""
    results = []
    for n, at in ((1500, 700), (N, 5000)):
        fake = FakeMemcached()
        try:
            data = {"sw-f-%05d" % i: b"v" for i in range(n)}
            fake.rule("sw-f-%05d" % at, rule)
            results.append(outcome(fastmc.Client([fake.address]).set_multi, data))
            assert len(fake.data) == stored(n, at)
            fake.rule("sw-f-%05d" % at, None)
            assert fastmc.Client([fake.address]).set_multi(data) == []
            assert len(fake.data) == n
        finally:
            fake.close()
    return results


def test_a_connection_lost_mid_stream_fails_the_call_as_one_batch_would():
    # The requests after the cut never reached a server that answered them.
    results = fault_in_one_piece_and_in_a_late_one("close_after_apply", lambda n, at: at + 1)
    assert results[0] is results[1] is fastmc.ReadError


def test_a_server_error_in_a_late_piece_fails_the_call_as_one_batch_would():
    # Every other key of every piece is stored.
    line = "line:SERVER_ERROR out of memory storing object"
    results = fault_in_one_piece_and_in_a_late_one(line, lambda n, at: n - 1)
    assert results[0] is results[1] is fastmc.ServerError


def test_noreply_writes_in_pieces(servers):
    """Not waited for, as pylibmc: every piece's requests still reach their servers, and the
    next request on each connection reads past whatever they answered."""
    mc = fastmc.Client(servers)
    data = {"sw-n-%05d" % i: i for i in range(N)}
    assert mc.set_multi(data, noreply=True) == []
    assert mc.get_multi(list(data)) == data
    assert mc.delete_multi(list(data), noreply=True) is True
    assert mc.get_multi(list(data)) == {}
