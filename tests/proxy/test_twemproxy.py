"""Through twemproxy (Debian's nutcracker 0.5.0), pooling three real memcached servers with
ketama and modula distributions, fastmc gives the results pylibmc gives through the same proxy,
or better ones, and never fails where pylibmc succeeds. twemproxy hangs up on commands it does
not know (the meta commands' `mn` among them), may answer a multi-key get out of request order,
and is one "server" for the client: marking it down would fail every caller."""

import time

import fastmc
import pylibmc
import pytest
from memcached import Memcached
from nutcracker import Nutcracker


@pytest.fixture(scope="module")
def backends():
    procs = [Memcached() for _ in range(3)]
    yield procs
    for p in procs:
        p.stop()


@pytest.fixture(scope="module", params=["ketama", "modula"])
def proxy(request, backends):
    n = Nutcracker(backends, distribution=request.param)
    yield n
    n.close()


@pytest.fixture
def clients(proxy):
    """(fastmc, pylibmc) through the proxy, on a flushed pool (twemproxy has no flush_all)."""
    for b in proxy.backends:
        fastmc.Client([b.address]).flush_all()
    return fastmc.Client([proxy.address]), pylibmc.Client([proxy.address])


def outcome(call):
    try:
        return ("ok", call())
    except pylibmc.Error as e:
        return ("raises", type(e).__name__)


def test_single_key_operations_match_pylibmc(clients):
    mf, mp = clients
    for mc, tag in ((mf, "f"), (mp, "p")):
        k = "single:" + tag
        steps = [
            lambda k=k, mc=mc: mc.set(k, "v"),
            lambda k=k, mc=mc: mc.get(k),
            lambda k=k, mc=mc: mc.add(k, "w"),
            lambda k=k, mc=mc: mc.replace(k, "w"),
            lambda k=k, mc=mc: mc.append(k, "+"),
            lambda k=k, mc=mc: mc.prepend(k, "-"),
            lambda k=k, mc=mc: mc.get(k),
            lambda k=k, mc=mc: mc.touch(k, 60),
            lambda k=k, mc=mc: mc.delete(k),
            lambda k=k, mc=mc: mc.delete(k),
            lambda k=k, mc=mc: mc.get(k),
            lambda k=k, mc=mc: mc.set(k + "n", 41),
            lambda k=k, mc=mc: mc.incr(k + "n"),
            lambda k=k, mc=mc: mc.decr(k + "n", 2),
            lambda k=k, mc=mc: mc.get(k + "n"),
        ]
        results = [outcome(s) for s in steps]
        if tag == "f":
            got_f = results
        else:
            assert got_f == results
    assert got_f[6] == ("ok", "-w+")


def test_gets_and_cas(proxy):
    mf = fastmc.Client([proxy.address], behaviors={"cas": True})
    mp = pylibmc.Client([proxy.address], behaviors={"cas": True})
    for mc in (mf, mp):
        assert mc.set("cas", "a")
        value, token = mc.gets("cas")
        assert value == "a"
        assert mc.cas("cas", "b", token)
        assert not mc.cas("cas", "c", token)
        assert mc.get("cas") == "b"


@pytest.mark.parametrize("op", ["set_multi", "add_multi", "replace_multi", "delete_multi"])
def test_multi_key_writes_match_pylibmc_and_leave_the_proxy_up(clients, op):
    """Each multi-key write through the proxy: the same result as pylibmc's, the writes applied,
    and the proxy still up for the next call (the meta probe never breaks a batch)."""
    mf, mp = clients
    for mc, tag in ((mf, "f"), (mp, "p")):
        keys = ["%s:%s:%d" % (op, tag, i) for i in range(50)]
        mc.set_multi({k: "old" for k in keys[::2]})
        if op == "delete_multi":
            result = mc.delete_multi(keys)
        else:
            result = getattr(mc, op)({k: "new" for k in keys})
        expected = {
            "set_multi": {k: "new" for k in keys},
            "add_multi": {k: ("old" if i % 2 == 0 else "new") for i, k in enumerate(keys)},
            "replace_multi": {k: "new" for k in keys[::2]},
            "delete_multi": {},
        }[op]
        assert mc.get_multi(keys) == expected
        assert mc.set("after:" + tag, 1) and mc.get("after:" + tag) == 1
        if op == "replace_multi":  # a fastmc extension: pylibmc has none
            break
        if tag == "f":
            got_f = result
        else:
            if op == "delete_multi":
                # pylibmc: False when some key was missing; fastmc's delete_multi does the same
                assert got_f == result
            else:
                assert sorted(got_f) == sorted(k.replace(":p:", ":f:") for k in result)


def test_get_multi_with_missing_keys_every_round(clients):
    """A 100-key get_multi with 10 keys missing, 40 rounds: the same dict every time (twemproxy
    may answer such a get out of request order)."""
    mf, _ = clients
    keys = ["gm:%d" % i for i in range(100)]
    present = {k: i for i, k in enumerate(keys) if i % 10 != 3}
    assert mf.set_multi(present) == []
    for _ in range(40):
        assert mf.get_multi(keys) == present


def test_rounds_of_writes_and_reads_never_fail(clients):
    """The loop an operator tried: set_multi then get_multi rounds for a second, no failure."""
    mf, _ = clients
    deadline = time.monotonic() + 1.0
    rounds = 0
    while time.monotonic() < deadline:
        batch = {"r%d:%d" % (rounds, i): i for i in range(20)}
        assert mf.set_multi(batch) == []
        assert mf.get_multi(list(batch)) == batch
        assert mf.delete_multi(list(batch))
        rounds += 1
    assert rounds > 10


def test_noreply_multi_write_then_read_back(clients):
    mf, _ = clients
    batch = {"nr:%d" % i: i for i in range(10_000)}
    assert mf.set_multi(batch, noreply=True) == []
    assert mf.get_multi(list(batch)) == batch


def test_a_restarted_proxy_is_invisible_to_reads(proxy, clients):
    mf, _ = clients
    assert mf.set("restart", "before")
    proxy.restart()
    assert mf.get("restart") == "before"
    assert mf.set_multi({"ra": 1, "rb": 2}) == []
    assert mf.get_multi(["ra", "rb"]) == {"ra": 1, "rb": 2}


def test_a_killed_backend_fails_only_its_keys(backends):
    """With a backend dead (no ejection), twemproxy answers its keys with SERVER_ERROR: fastmc
    fails only those keys and keeps the proxy up for the others (pylibmc marks the proxy down,
    then fails every key with ServerDown). A multi-key get that touches the dead backend is
    answered with an error line and a hang-up: it raises, and the proxy is not marked down."""
    procs = [Memcached() for _ in range(3)]
    proxy = Nutcracker(procs, distribution="ketama", timeout_ms=300)
    try:
        mf = fastmc.Client([proxy.address], behaviors={"retry_timeout": 10})
        keys = ["kb:%d" % i for i in range(60)]
        assert mf.set_multi({k: k for k in keys}) == []
        dead = {k for k in keys if fastmc.Client([procs[1].address]).get(k) is not None}
        assert 0 < len(dead) < len(keys)
        procs[1].stop()
        for k in keys:
            if k in dead:
                with pytest.raises(fastmc.ServerError):
                    mf.get(k)
            else:
                assert mf.get(k) == k
        with pytest.raises(fastmc.Error) as ei:
            mf.get_multi(keys)
        assert not isinstance(ei.value, fastmc.ServerDown)
        live = sorted(set(keys) - dead)
        assert mf.get(live[0]) == live[0]  # not marked down
        assert mf.get_multi(live) == {k: k for k in live}
    finally:
        proxy.close()
        for p in procs:
            p.stop()


def test_other_multi_operations(clients):
    """incr_multi (compared with pylibmc), and fastmc's touch_multi and gets_multi."""
    mf, mp = clients
    for mc, tag in ((mf, "f"), (mp, "p")):
        keys = ["im:%s:%d" % (tag, i) for i in range(20)]
        assert mc.set_multi({k: 10 for k in keys}) == []
        mc.incr_multi(keys, delta=5)
        assert mc.get_multi(keys) == {k: 15 for k in keys}
        assert mc.get_multi([k.split(":", 1)[1] for k in keys], key_prefix="im:") == {
            k.split(":", 1)[1]: 15 for k in keys
        }
    keys = ["im:f:%d" % i for i in range(20)]
    assert mf.touch_multi([*keys, "im:none"], time=60) == ["im:none"]
    got = mf.gets_multi(keys)
    assert sorted(got) == sorted(keys) and all(v == 15 for v, _ in got.values())


def test_a_refused_flush_all_leaves_the_proxy_up(proxy):
    """twemproxy hangs up on flush_all: the call raises, as pylibmc's does, and the proxy is
    not marked down (pylibmc then answers ServerDown until retry_timeout)."""
    mc = fastmc.Client([proxy.address], behaviors={"retry_timeout": 60})
    mc.set("before-flush", 1)
    with pytest.raises(fastmc.Error):
        mc.flush_all()
    assert mc.get("before-flush") == 1
    assert mc.metrics()[proxy.address]["server_down_skips"] == 0
