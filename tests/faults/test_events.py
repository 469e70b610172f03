"""Server state changes: a healthy server marked down, answering again, ejected and back in the
ring are logged on the ``fastmc`` logger and passed to the callbacks registered with
``Client.on``, after the call that noticed them, on the caller's thread (the asyncio client: on
the loop's thread); a callback that raises is logged and swallowed."""

import asyncio
import logging
import threading
import time

import fastmc
import fastmc.aio
import pytest
from memcached import Memcached


def test_down_up_ejected_rejoined_reach_callbacks_and_the_log(caplog):
    a, b = Memcached(), Memcached()
    try:
        mc = fastmc.Client(
            [a.address, b.address],
            behaviors={
                "retry_timeout": 1,
                "remove_failed": 1,
                "connect_timeout": 300,
                "_poll_timeout": 300,
                "ketama": True,
            },
        )
        seen = []
        threads = set()
        for event in ("server_down", "server_up", "server_ejected", "server_rejoined"):
            mc.on(
                event, lambda s, e, d: (seen.append((s, e, d)), threads.add(threading.get_ident()))
            )
        keys = ["ev%d" % i for i in range(20)]
        assert mc.set_multi(dict.fromkeys(keys, 1)) == []
        a.stop()
        with caplog.at_level(logging.INFO, logger="fastmc"):
            mc.get_multi(keys)
            assert [e for _, e, _ in seen] == ["server_down", "server_ejected"]
            assert all(s == a.address for s, _, _ in seen)
            assert "CONNECTION FAILURE" in seen[0][2] or "READ FAILURE" in seen[0][2]
            a.start()
            time.sleep(1.1)
            mc.get_multi(keys)
            mc.get_multi(keys)
        events = [e for _, e, _ in seen]
        assert events[:2] == ["server_down", "server_ejected"]
        assert "server_rejoined" in events and "server_up" in events
        assert threads == {threading.get_ident()}  # called on the calling thread
        messages = [r.getMessage() for r in caplog.records if r.name == "fastmc"]
        assert any("marked down" in m for m in messages)
        assert any("back in the ring" in m for m in messages)
        assert [r.levelname for r in caplog.records if "marked down" in r.getMessage()] == [
            "WARNING"
        ]
    finally:
        a.stop()
        b.stop()


def test_a_failing_callback_is_logged_and_swallowed(caplog):
    dead = Memcached()
    dead.stop()
    mc = fastmc.Client([dead.address], behaviors={"connect_timeout": 200})

    def broken(server, event, detail):
        raise RuntimeError("callback bug")

    mc.on("server_down", broken)
    with caplog.at_level(logging.ERROR, logger="fastmc"), pytest.raises(fastmc.ConnectionError):
        mc.get("k")  # the call's own error, not the callback's
    errors = [r for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and "server_down callback raised" in errors[0].getMessage()
    assert isinstance(errors[0].exc_info[1], RuntimeError)
    assert mc.off("server_down", broken) is True and mc.off("server_down", broken) is False
    with pytest.raises(ValueError, match="unknown event"):
        mc.on("server_exploded", broken)


def test_asyncio_client_delivers_on_the_loop_thread():
    dead = Memcached()
    dead.stop()

    async def main():
        mc = fastmc.aio.Client([dead.address], behaviors={"connect_timeout": 200})
        seen = []
        mc.on("server_down", lambda s, e, d: seen.append((e, threading.get_ident())))
        with pytest.raises(fastmc.ConnectionError):
            await mc.get("k")
        await mc.close()
        return seen

    seen = asyncio.run(main())
    assert seen == [("server_down", threading.get_ident())]


def test_noreply_writes_deliver_events_to_callbacks_that_use_the_client():
    """A noreply write (the short path that keeps the interpreter) delivers what it noticed like
    any call, and the callback may use the client itself."""
    a = Memcached()
    try:
        mc = fastmc.Client(
            [a.address],
            behaviors={"retry_timeout": 1, "connect_timeout": 300, "_poll_timeout": 300},
        )
        seen = []
        mc.on("server_down", lambda s, e, d: seen.append(e))
        mc.on("server_up", lambda s, e, d: seen.append((e, mc.get("nr0"))))
        for i in range(3):
            assert mc.set("nr%d" % i, i, noreply=True) is True
        assert mc.get("nr2") == 2
        a.stop()
        with pytest.raises(fastmc.Error):
            mc.delete("nr1", noreply=True)
            mc.get("nr1")
        assert seen == ["server_down"]
        a.start()
        time.sleep(1.1)
        for i in range(3):
            assert mc.set("nr%d" % i, i * 10, noreply=True) is True
        assert seen == ["server_down", ("server_up", 0)]
        assert mc.get_multi(["nr0", "nr1", "nr2"]) == {"nr0": 0, "nr1": 10, "nr2": 20}
    finally:
        a.stop()
