"""What proxies other than twemproxy answer, reproduced by an in-process fake (neither mcrouter
nor memcached's built-in proxy is packaged here): error lines in place of values in a multi-key
get, values out of request order, meta commands refused by hanging up (dropping everything in
flight) or by silence. In each case only the affected keys fail, the proxy is never marked down,
and no batch is lost."""

import time

import fastmc
import pytest
from fakes import MiniMemcached


@pytest.fixture
def fake(request):
    f = MiniMemcached(**getattr(request, "param", {}))
    yield f
    f.close()


@pytest.mark.parametrize("fake", [{"backend_errors": {"k3", "k7"}}], indirect=True)
def test_error_lines_in_a_get_fail_only_those_keys(fake):
    """memcached's proxy answers a key whose backend failed with `SERVER_ERROR backend failure`
    in place of its value: pylibmc's default leaves a failed key out of the result, the behavior
    get_multi_raise_on_error raises; the connection is kept either way."""
    mc = fastmc.Client([fake.address])
    keys = ["k%d" % i for i in range(10)]
    fake.data.update({k.encode(): (0, b"v") for k in keys})
    assert mc.get_multi(keys) == {k: b"v" for k in keys if k not in ("k3", "k7")}
    strict = fastmc.Client([fake.address], behaviors={"get_multi_raise_on_error": 1})
    with pytest.raises(fastmc.ServerError):
        strict.get_multi(keys)
    with pytest.raises(fastmc.ServerError):
        mc.get("k3")  # alone, the error line is the whole reply
    assert mc.get("k4") == b"v"
    assert fake.accepted == 2  # one connection per client: none was dropped


@pytest.mark.parametrize("fake", [{"backend_errors": {"k0"}, "reorder": True}], indirect=True)
def test_values_out_of_order_with_an_error_line(fake):
    mc = fastmc.Client([fake.address])
    keys = ["k%d" % i for i in range(6)]
    fake.data.update({k.encode(): (0, k.encode()) for k in keys[::2]})
    # k0 failed; with hits out of order, every key without a hit is failed with it (left out)
    assert mc.get_multi(keys) == {"k2": b"k2", "k4": b"k4"}
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
