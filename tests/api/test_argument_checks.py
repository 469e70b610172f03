"""Argument checks against real pylibmc: for every method, an argument of the wrong type (None
included), an integer out of the C type's range, a key with a lone surrogate, a bytearray or a
memoryview, alone and combined with another bad argument before or after it. pylibmc converts its
arguments in its C format string's order (`s#O|IIi` for set) before it looks at anything else;
fastmc must raise the same class with the same message, and send nothing."""

# The lambdas below are called inside the loop iteration that makes them.
# ruff: noqa: B023

import fastmc
import pylibmc
import pytest


class Index:
    """An int by `__index__` (what C's integer formats accept, except `k`)."""

    def __index__(self):
        return 7


class BadIndex:
    def __index__(self):
        raise RuntimeError("no index")


class Unpicklable:
    def __reduce__(self):
        raise RuntimeError("not picklable")


class Counted:
    """Counts how often it is pickled: pylibmc encodes every str key before any value."""

    pickled = 0

    def __reduce__(self):
        Counted.pickled += 1
        return (Counted, ())


SUR = "\ud800"
NOT_INTS = [None, 1.5, "1", b"1", Index(), BadIndex(), True]
BIG = [-1, -(2**31) - 1, 2**31, 2**32 + 5, 2**63, 2**64 + 3, -(2**64) - 3, 2**100]
BAD_KEYS = [None, 1, SUR, "a" + SUR, bytearray(b"k"), memoryview(b"k"), "x" * 251, ""]


def calls():
    """(label, call(client)) for every argument family of every method."""
    out = []

    def add(label, fn):
        out.append((label, fn))

    for m in ("set", "add", "replace", "append", "prepend"):
        for v in NOT_INTS + BIG:
            add(f"{m} time={v!r}", lambda c, m=m, v=v: getattr(c, m)("k", "v", v))
            add(f"{m} mcl={v!r}", lambda c, m=m, v=v: getattr(c, m)("k", "v", min_compress_len=v))
            add(f"{m} level={v!r}", lambda c, m=m, v=v: getattr(c, m)("k", "v", 0, 0, v))
        for k in BAD_KEYS:
            add(f"{m} key={k!r}", lambda c, m=m, k=k: getattr(c, m)(k, "v"))
            # the key's type first, its length after the other arguments' types
            add(f"{m} key={k!r} time=None", lambda c, m=m, k=k: getattr(c, m)(k, "v", None))
            add(f"{m} key={k!r} level=10", lambda c, m=m, k=k: getattr(c, m)(k, "v", 0, 0, 10))
    for v in NOT_INTS + BIG:
        add(f"cas token={v!r}", lambda c, v=v: c.cas("k", "v", v))
        add(f"cas time={v!r}", lambda c, v=v: c.cas("k", "v", 1, v))
        add(f"cas '' time={v!r}", lambda c, v=v: c.cas("", "v", 1, v))
        for m in ("incr", "decr"):
            add(f"{m} delta={v!r}", lambda c, m=m, v=v: getattr(c, m)("k", v))
            add(f"{m} '' delta={v!r}", lambda c, m=m, v=v: getattr(c, m)("", v))
            add(f"{m} sur delta={v!r}", lambda c, m=m, v=v: getattr(c, m)(SUR, v))
            add(f"{m} long delta={v!r}", lambda c, m=m, v=v: getattr(c, m)("x" * 251, v))
        add(f"touch sur time={v!r}", lambda c, v=v: c.touch(SUR, v))
        add(f"touch long time={v!r}", lambda c, v=v: c.touch("x" * 251, v))
        add(f"set_multi time={v!r}", lambda c, v=v: c.set_multi({"k": 1}, v))
        add(f"set_multi mcl={v!r}", lambda c, v=v: c.set_multi({"k": 1}, min_compress_len=v))
        add(f"set_multi level={v!r}", lambda c, v=v: c.set_multi({"k": 1}, compress_level=v))
        add(f"set_multi sur time={v!r}", lambda c, v=v: c.set_multi({1: 1, SUR: 2}, v))
        add(f"add_multi time={v!r}", lambda c, v=v: c.add_multi({"k": 1}, v))
        add(f"incr_multi delta={v!r}", lambda c, v=v: c.incr_multi(["k"], delta=v))
        add(f"incr_multi sur delta={v!r}", lambda c, v=v: c.incr_multi([SUR], delta=v))
    for v in NOT_INTS:
        add(f"touch time={v!r}", lambda c, v=v: c.touch("k", v))
        add(f"flush_all time={v!r}", lambda c, v=v: c.flush_all(v))
        add(f"get_stats {v!r}", lambda c, v=v: c.get_stats(v))
    for k in [*BAD_KEYS, "k", b"k"]:
        add(f"cas key={k!r}", lambda c, k=k: c.cas(k, "v", 1))
        add(f"cas key={k!r} token=None", lambda c, k=k: c.cas(k, "v", None))
        add(f"touch key={k!r} time=None", lambda c, k=k: c.touch(k, None))
        for m in ("delete", "get", "hash", "__getitem__", "__delitem__", "__contains__"):
            add(f"{m} key={k!r}", lambda c, m=m, k=k: getattr(c, m)(k))
        add(f"gets key={k!r}", lambda c, k=k: gets_shape(c, k))
        add(f"__setitem__ key={k!r}", lambda c, k=k: c.__setitem__(k, 1))
        for m in ("get_multi", "delete_multi", "incr_multi"):
            add(f"{m} [k, {k!r}]", lambda c, m=m, k=k: getattr(c, m)(["k", k]))
            add(f"{m} prefix={k!r}", lambda c, m=m, k=k: getattr(c, m)(["k"], k))
        add(f"delete_multi [x, {k!r}, k]", lambda c, k=k: c.delete_multi(["x", k, "k"]))
        # Two bad keys: which one raises (every str key is encoded before any key is checked).
        for k2 in (SUR, "b" + SUR, 1, "y" * 251):
            for m in ("get_multi", "delete_multi"):
                add(f"{m} [{k!r}, {k2!r}]", lambda c, m=m, k=k, k2=k2: getattr(c, m)([k, k2]))
            if k.__hash__ is not None:
                add(
                    f"set_multi {{{k!r}, {k2!r}}}", lambda c, k=k, k2=k2: c.set_multi({k: 1, k2: 2})
                )
        # A bad value, or one pickled (the caller's code), before a bad key.
        for v in (SUR, Unpicklable(), [Counted()]):
            if k.__hash__ is not None:
                add(
                    f"set_multi {{a: {v!r}, {k!r}}}",
                    lambda c, k=k, v=v: c.set_multi({"a": v, k: 2}),
                )
        for m in ("set_multi", "add_multi"):
            add(f"{m} key={k!r}", lambda c, m=m, k=k: getattr(c, m)({"k": 1, k: 2}))
            add(f"{m} prefix={k!r}", lambda c, m=m, k=k: getattr(c, m)({"k": 1}, 0, k))
    for m in ("get_multi", "delete_multi", "incr_multi", "set_multi"):
        for keys in (None, 1, {"k": 1}, [["k"]]):
            add(f"{m} keys={keys!r}", lambda c, m=m, keys=keys: getattr(c, m)(keys))
        add(
            f"{m} prefix=None",
            lambda c, m=m: getattr(c, m)({"k": 1} if "set" in m else ["k"], None),
        )
    add("incr_multi delta=None prefix=None", lambda c: c.incr_multi(["k"], None, None))
    add("cas of a missing key", lambda c: c.cas("zz", "v", 1))
    add("get_stats ''", lambda c: c.get_stats(""))
    add("get_stats 'a\\0'", lambda c: c.get_stats("a\0"))
    add("get_stats surrogate", lambda c: c.get_stats(SUR))
    return out


def gets_shape(c, k):
    """gets' value, and whether it came with a token (the two servers' tokens differ)."""
    v, token = c.gets(k)
    return v, token is not None


def outcome(fn):
    """The result, or the exception's class name and message (without object addresses)."""
    try:
        return ("ok", fn())
    except Exception as e:
        return ("raise", type(e).__name__, str(e))


def state(c):
    """What the calls may have changed (nothing, when an argument is refused)."""
    return c.get_multi(["k", "x"])


@pytest.mark.parametrize("behaviors", [{}, {"cas": True}, {"verify_keys": True, "cas": True}])
def test_argument_checks_match_pylibmc(server, behaviors):
    theirs = pylibmc.Client([server.address], behaviors=behaviors)
    ours = fastmc.Client([server.address], behaviors=behaviors)
    differences = []
    for label, call in calls():
        results = []
        for c in (theirs, ours):
            c.flush_all()
            c.set_multi({"k": "5", "x": "6"})
            Counted.pickled = 0
            results.append((outcome(lambda: call(c)), state(c), Counted.pickled))
        if results[0] != results[1]:
            differences.append((label, *results))
    assert differences == []


def test_kept_differences_of_argument_ranges(server):
    """Where pylibmc fails by accident, fastmc does what the argument asks (README, "Known
    differences"): flush_all with a time beyond 64 bits raises OverflowError before flushing
    (pylibmc flushes at once and raises SystemError); touch wraps any time to 32 bits as the
    stores do (pylibmc's libmemcached fails a negative one, memcached one from 2**63)."""
    mc = fastmc.Client([server.address])
    mc.set("k", 1)
    with pytest.raises(OverflowError):
        mc.flush_all(2**64)
    assert mc.get("k") == 1
    assert mc.touch("k", 2**63 + 100)
    assert mc.get("k") == 1
    assert mc.touch("k", -1)
    assert mc.get("k") is None


def test_cas_token_of_twenty_digits(server):
    """libmemcached formats a text command's numbers into 20 characters: a cas token of 20
    digits (negative, as pylibmc's signed argument) fails with AllocationError before anything is
    sent; in binary mode the token is a field and the server answers."""
    for binary in (False, True):
        results = []
        for mod in (pylibmc, fastmc):
            c = mod.Client([server.address], behaviors={"cas": True}, binary=binary)
            c.set("k", 1)
            results.append(
                [outcome(lambda t=t: c.cas("k", 2, t)) for t in (-1, 10**19 - 2**64, -(2**63))]
                + [c.get("k")]
            )
        assert results[0] == results[1], binary


def test_gets_messages_name_no_key(server):
    """pylibmc's gets names no key in its messages (its other methods do)."""
    results = []
    for mod in (pylibmc, fastmc):
        c = mod.Client([server.address], behaviors={"verify_keys": True, "cas": True})
        e = outcome(lambda: c.gets("é"))
        results.append((e[1], e[2].startswith("error 33 from memcached_gets: ")))
    assert results[0] == results[1] == ("BadKeyProvided", True)


def test_touch_with_verify_keys(server):
    """libmemcached's touch does not apply verify_keys: a non-ASCII key is sent, and touches
    the item if there is one; a key with a space is refused in either mode."""
    results = []
    for mod in (pylibmc, fastmc):
        c = mod.Client([server.address])
        c.flush_all()
        c.set("é", 1)
        c.behaviors = {"verify_keys": True}
        out = [outcome(lambda k=k: c.touch(k, 10)) for k in ("é", b"\xc3\xa9", b"\xff", "zz")]
        out.append(outcome(lambda: c.set("é", 2)))
        results.append(out)
    assert results[0] == results[1]
    assert results[0][0] == ("ok", True)
