"""What no proxy packaged for the test machines can be made to do, reproduced by an in-process
fake: hits out of request order together with error lines in place of values (mcrouter may
answer so; memcached's built-in proxy answers in order, twemproxy hangs up after an error line),
hits out of order on every round (twemproxy only sometimes reorders), and `mn` refused by
silence or by a hang-up that drops everything in flight (counted exactly here: twemproxy's
hang-up is tested for real in test_twemproxy.py). In each case only the affected keys fail, the
proxy is never marked down, and no batch is lost. memcached's proxy itself, error lines
included, is tested for real in test_memcached_proxy.py."""

import time

import fastmc
import pytest
from fakes import MiniMemcached


@pytest.fixture
def fake(request):
    f = MiniMemcached(**getattr(request, "param", {}))
    yield f
    f.close()


@pytest.mark.parametrize("fake", [{"backend_errors": {"k0"}, "reorder": True}], indirect=True)
def test_values_out_of_order_with_an_error_line(fake):
    mc = fastmc.Client([fake.address])
    keys = ["k%d" % i for i in range(6)]
    fake.data.update({k.encode(): (0, k.encode()) for k in keys[::2]})
    # k0 failed; with hits out of order the error line may stand for any key without a hit:
    # those are read again, one get each, which tells the failed key from the misses
    assert mc.get_multi(keys) == {"k2": b"k2", "k4": b"k4"}
    sent = fake.take()
    assert all(b"get %s\r\n" % k.encode() in sent for k in ("k0", "k1", "k3", "k5"))
    assert fake.accepted == 1


@pytest.mark.parametrize("fake", [{"reorder": True}], indirect=True)
def test_values_out_of_order_are_matched_by_key(fake):
    mc = fastmc.Client([fake.address])
    data = {"r%d" % i: i for i in range(50) if i % 7}
    assert mc.set_multi(data) == []
    for _ in range(5):
        assert mc.get_multi(["r%d" % i for i in range(50)]) == data
    assert fake.accepted == 1


@pytest.mark.parametrize("fake", [{"unknown": "drop"}], indirect=True)
def test_a_proxy_that_drops_everything_on_mn_loses_no_batch(fake):
    """twemproxy hangs up on `mn` without answering anything else in flight: the probe is sent
    only after the batch was answered, so the batch is whole, the server is not marked down,
    and it is asked once."""
    mc = fastmc.Client([fake.address])
    for i in range(3):
        assert mc.set_multi({"a%d" % i: i, "b%d" % i: i}) == []
        assert mc.delete_multi(["a%d" % i, "zz"]) is False
        assert mc.get("b%d" % i) == i
    assert fake.commands().count(b"mn") == 1
    assert fake.accepted == 2  # the connection the probe cost, and no other


@pytest.mark.parametrize("fake", [{"unknown": "ignore"}], indirect=True)
def test_a_proxy_silent_on_mn_costs_one_short_wait(fake):
    """A proxy that neither answers `mn` nor hangs up: the probe gives up after its own short
    limit (not the 20 s read timeout set here), and the server is known not to speak meta."""
    mc = fastmc.Client([fake.address], behaviors={"_poll_timeout": 20_000})
    start = time.monotonic()
    assert mc.set_multi({"a": 1, "b": 2}) == []
    first = time.monotonic() - start
    assert mc.set_multi({"c": 3, "d": 4}) == []
    assert mc.get_multi(["a", "b", "c", "d"]) == {"a": 1, "b": 2, "c": 3, "d": 4}
    assert fake.commands().count(b"mn") == 1
    assert first < 10  # a hang would take the 20 s read timeout


@pytest.mark.parametrize("fake", [{"unknown": "drop"}], indirect=True)
def test_noreply_multi_writes_through_a_proxy_are_not_waited_for(fake):
    mc = fastmc.Client([fake.address])
    batch = {"n%d" % i: i for i in range(2000)}
    assert mc.set_multi(batch, noreply=True) == []
    assert mc.get_multi(list(batch)) == batch
    assert b"version" in fake.commands()  # the next request read what the writes owed first
