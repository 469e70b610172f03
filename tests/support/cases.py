"""The differential cases: each ``CASES[name](module, client)`` runs once through real pylibmc
(the oracle) and once through fastmc, against the same freshly flushed memcached, and the
outcomes (return value, or exception class name) must be equal. Shared by test_pylibmc_diff.py
(text protocol) and test_binary.py (binary=True)."""

import pickle

import fastmc
import pylibmc


def outcome(fn):
    """("ok", what `fn()` returned) or ("raise", the exception's class name)."""
    try:
        v = fn()
    except Exception as e:  # compare by class name: the modules have their own classes
        return ("raise", type(e).__name__)
    return ("ok", v)


def run_both(addrs, case, behaviors=None, binary=False):
    """Run `case(module, client)` through pylibmc, then fastmc, each on the freshly flushed
    servers `addrs`: [pylibmc's outcome, fastmc's outcome]."""
    results = []
    for mod in (pylibmc, fastmc):
        mc = mod.Client(addrs, behaviors=behaviors, binary=binary)
        mc.flush_all()
        results.append(outcome(lambda mc=mc, mod=mod: case(mod, mc)))
    return results


def _message(fn):
    """The exception's class name and message (pylibmc's doctests check messages)."""
    try:
        fn()
    except Exception as e:
        return type(e).__name__, str(e)
    return None


class Custom:
    def __init__(self, x):
        self.x = x

    def __eq__(self, other):
        return isinstance(other, Custom) and other.x == self.x


VALUES = [
    b"bytes",
    b"",
    "text",
    "",
    "åäö",
    0,
    42,
    -1,
    2**63,
    -(2**70),
    True,
    False,
    1.5,
    None,
    [1, 2],
    (1, "a"),
    {"a": 1},
    {1, 2},
    Custom(3),
    b"x" * 5000,
]


# int-flagged values that are not ints (an append made them so): PyLong_FromString's errors
# name the first 200 bytes, or are the UnicodeDecodeError of decoding them
NOT_INTS = [b" 1_2 ", b"a-5", b"\xffa-5", "\u0663".encode(), b"12\x00z", b"x" * 300]
NOT_INTS += ["\u00e9".encode() * 150, b"\xc3", b"+5", b""]


def _too_large_writes(c):
    """Each write command with a value over the item size limit, after `set`: its outcome and
    what the key holds afterwards (memcached drops the old item for a refused `set`, and for a
    refused binary SET with a CAS, which is why `cas` must go as a REPLACE with a CAS)."""
    c.behaviors = {"cas": True}
    big = b"x" * (2**20 + 10)
    out = []
    for op in ("set", "add", "replace", "append", "prepend", "cas"):
        c.set("tl", "v")
        if op == "cas":
            token = c.gets("tl")[1]
            result = outcome(lambda token=token: c.cas("tl", big, token))
        else:
            result = outcome(lambda op=op: getattr(c, op)("tl", big))
        out.append((op, result, c.get("tl")))
    return out


def _incr_multi_long_keys(c):
    """incr_multi with a key over 250 bytes (the prefix not counted) raises before anything is
    sent; with the prefix past 250 the key fails alone. The counter shows what was sent."""
    out = []
    for keys, prefix in (
        (["n", "M" * 251], {}),
        (["n", "é" * 130], {}),
        (["n", "M" * 251], {"key_prefix": "px"}),
        (["n", "M" * 250], {"key_prefix": "px"}),
    ):
        c.set("n", 5)
        c.set("pxn", 5)
        result = outcome(lambda k=keys, p=prefix: c.incr_multi(k, **p))
        out.append((result, c.get("n"), c.get("pxn")))
    return out


def _bad_keys_caught_as_pylibmcs(m, c):
    """Code written for pylibmc catches the classes pylibmc raised for keys it sent and the
    server refused (pylibmc's own doctests and test_cmemcached): fastmc never sends such a key,
    and its BadKeyProvided is also each of those classes."""
    out = []
    try:
        out.append(("incr", c.incr(chr(0))))
    except (m.ProtocolError, m.SocketCreateError):
        out.append(("incr", "caught"))
    try:
        out.append(("delete", c.delete("hello world")))
    except m.ClientError:
        out.append(("delete", "caught"))
    c.set_multi({"a": 1, "b": 2, "c": 3})
    out.append(("get_multi", c.get_multi(["a", "b", "c", "", "hello world"])))
    return out


def _incr_multi_failure_classes(c):
    """pylibmc's class for an incr_multi where some keys fail, for every mix of missing keys,
    values that are not numbers and keys that are incremented, in several orders."""
    c.set_multi({"s": "abc", "t": "xyz", "n": 1, "n2": 2})
    mixes = (
        ["zz", "s"],
        ["s", "zz"],
        ["s"],
        ["zz"],
        ["s", "n"],
        ["n", "zz", "s"],
        ["zz", "s", "zz2"],
        ["s", "t"],
        ["s", "t", "zz"],
        ["zz", "s", "t"],
        ["s", "zz", "t"],
        ["s", "n", "t"],
        ["s", "t", "n"],
        ["n", "s"],
        ["n", "s", "n2"],
        ["s", "n", "zz"],
        ["zz", "n"],
        ["zz", "n", "s"],
        ["n", "n2"],
    )
    return [(keys, outcome(lambda k=keys: c.incr_multi(k))) for keys in mixes]


def _incr_multi_refused_keys(c):
    """incr_multi where keys are refused before they are sent (too long with the prefix): with
    more than one failure pylibmc's class is the base Error, whatever the last key did."""
    prefix = "p" * 249
    c.set_multi({"n": 1}, key_prefix=prefix)
    mixes = (["aa", "bb", "n"], ["aa", "n"], ["n", "aa"], ["aa", "zz"], ["aa", "bb"])
    return [
        (keys, outcome(lambda k=keys: c.incr_multi(k, key_prefix=prefix)), c.get(prefix + "n"))
        for keys in mixes
    ]


def _get_multi_verify_keys_refuses_first(c):
    """With verify_keys, one refused key fails the whole get_multi before any value is decoded
    (so before a value that cannot be decoded raises)."""
    c.set("s", "text")
    c.append("s", b"\xff")
    c.behaviors = {"verify_keys": True}
    return [outcome(lambda k=k: c.get_multi(k)) for k in (["s", "\u00e9"], ["\u00e9", "s"], ["s"])]


# Text protocol only: with binary=True pylibmc marks the server down on a value that is not a
# number, which docs/binary-sasl-tls.md lists among the binary differences; verify_keys is
# refused in binary mode.
TEXT_CASES = {
    "incr_multi_failure_classes": lambda m, c: _incr_multi_failure_classes(c),
    "get_multi_verify_keys_refuses_first": lambda m, c: _get_multi_verify_keys_refuses_first(c),
}

CASES = {
    "bad_keys_caught_as_pylibmcs": _bad_keys_caught_as_pylibmcs,
    "incr_multi_long_keys_send_nothing": lambda m, c: _incr_multi_long_keys(c),
    "incr_multi_refused_keys": lambda m, c: _incr_multi_refused_keys(c),
    "too_large_writes_leave_what_pylibmc_leaves": lambda m, c: _too_large_writes(c),
    "get_missing": lambda m, c: c.get("nope"),
    "get_default": lambda m, c: c.get("nope", "D"),
    "get_stored_none_not_default": lambda m, c: (c.set("n", None), c.get("n", "D")),
    "get_empty_key": lambda m, c: c.get("", "D"),
    "set_get_roundtrip": lambda m, c: [
        (c.set("v%d" % i, v), c.get("v%d" % i)) for i, v in enumerate(VALUES)
    ],
    "bool_reads_back_int": lambda m, c: (c.set("b", True), type(c.get("b")).__name__, c.get("b")),
    "str_bytes_share_storage": lambda m, c: (
        c.set("k", 1),
        c.get(b"k"),
        c.set(b"k2", 2),
        c.get("k2"),
    ),
    "utf8_keys": lambda m, c: (c.set("ключ😀", "v"), c.get("ключ😀".encode())),
    "add_existing": lambda m, c: (c.add("a", 1), c.add("a", 2), c.get("a")),
    "replace_missing": lambda m, c: (
        c.replace("r", 1),
        c.set("r", 0),
        c.replace("r", 2),
        c.get("r"),
    ),
    "append_prepend": lambda m, c: (
        c.append("ap", "x"),
        c.set("ap", 12),
        c.append("ap", 3),
        c.prepend("ap", 9),
        c.get("ap"),
        c.set("bx", b"x"),
        c.append("bx", "y"),
        c.get("bx"),
    ),
    "append_empty_has": lambda m, c: (c.append("h", ""), c.set("h", "v"), c.append("h", "")),
    "set_empty_key": lambda m, c: c.set("", "hi"),
    "delete": lambda m, c: (c.delete("d"), c.set("d", 1), c.delete("d"), c.delete(""), c.get("d")),
    "delete_two_args": lambda m, c: c.delete("foo", 123),
    "delete_argument_messages": lambda m, c: [
        _message(f)
        for f in (
            lambda: c.delete(),
            lambda: c.delete("a", 1),
            lambda: c.delete("a", 1, 2),
            lambda: c.delete(None),
            lambda: c.delete(1),
        )
    ],
    "incr_decr": lambda m, c: (
        c.set("i", 41),
        c.incr("i"),
        c.incr("i", 10),
        c.decr("i", 100),
        c.incr("i", 0),
    ),
    "incr_missing": lambda m, c: c.incr("missing"),
    "incr_non_numeric": lambda m, c: (c.set("nn", "abc"), c.incr("nn")),
    "incr_pickled_none": lambda m, c: (c.set("pn", None), c.incr("pn")),
    "incr_keeps_str_flags": lambda m, c: (c.set("s", "41"), c.incr("s"), c.get("s")),
    "incr_wraps": lambda m, c: (c.set("w", 2**64 - 1), c.incr("w")),
    "incr_negative_delta": lambda m, c: c.incr("x", -1),
    "incr_big_delta": lambda m, c: c.incr("x", 2**31),
    "incr_empty_key": lambda m, c: c.incr(""),
    "touch": lambda m, c: (c.touch("t", 10), c.set("t", 1), c.touch("t", 10), c.touch("", 1)),
    "negative_time_expires": lambda m, c: (c.set("e", 1, -1), c.get("e")),
    "time_wraps": lambda m, c: (c.set("tw", 1, 2**32), c.get("tw")),
    "float_time": lambda m, c: c.set("f", 1, 1.5),
    "key_int": lambda m, c: c.get(1),
    "set_key_int": lambda m, c: c.set(1, 1),
    "key_251": lambda m, c: c.get("x" * 251),
    "key_250": lambda m, c: (c.set("x" * 250, 1), c.get("x" * 250)),
    "gets_without_cas": lambda m, c: c.gets("k"),
    "cas_without_cas_checks_the_behavior_first": lambda m, c: [
        outcome(lambda k=k: c.cas(k, "v", 1)) for k in ("", "x" * 300, "k", 1)
    ],
    "gets_empty": lambda m, c: c.gets(""),
    "cas_without_cas": lambda m, c: c.cas("k", 1, 1),
    "compress": lambda m, c: (
        c.set("z", "a" * 1000, min_compress_len=1),
        c.get("z"),
        c.set("big", b"a" * (1024 * 1024 + 1), min_compress_len=1),
        len(c.get("big")),
    ),
    "compress_level_bad": lambda m, c: c.set("z", "a", compress_level=10),
    "too_big": lambda m, c: c.set("huge", b"x" * (2 * 1024 * 1024)),
    "serialize": lambda m, c: [c.serialize(v) for v in (b"b", "s", 1, True, 2**64)],
    "deserialize": lambda m, c: (
        c.deserialize(b"5", 4),
        c.deserialize(b"5", 2),
        c.deserialize(b"x", 0),
        c.deserialize(pickle.dumps([1]), 1),
    ),
    "deserialize_unknown_flags": lambda m, c: c.deserialize(b"x", 3),
    "int_values_that_are_not_ints": lambda m, c: [
        _message(lambda v=v: c.deserialize(v, 4)) or c.deserialize(v, 4) for v in NOT_INTS
    ],
    "mapping": lambda m, c: (
        c.__setitem__("m", 1),
        c["m"],
        "m" in c,
        "zz" in c,
        c.__delitem__("m"),
        "m" in c,
    ),
    "mapping_missing": lambda m, c: c["missing"],
    "mapping_del_missing": lambda m, c: c.__delitem__("missing"),
    "flush_all": lambda m, c: (c.set("fa", 1), c.flush_all(), c.get("fa")),
    "stats_shape": lambda m, c: [
        (type(n).__name__, sorted(s), {type(v).__name__ for v in s.values()})
        for n, s in c.get_stats()
    ],
    "hash_index": lambda m, c: [c.hash("key%d" % i) for i in range(40)],
    # the _socket_*_size read-backs come from a live connection to the first server, as pylibmc's
    "behaviors_defaults": lambda m, c: dict(c.behaviors),
    "behaviors_unknown": lambda m, c: c.set_behaviors({"foo": 1}),
    "behaviors_bad_type": lambda m, c: c.set_behaviors({"tcp_nodelay": 1.5}),
    "behaviors_hash_int": lambda m, c: c.set_behaviors({"hash": 2}),
    "behaviors_retry_zero": lambda m, c: c.set_behaviors({"retry_timeout": 0}),
    "behaviors_set_read": lambda m, c: (
        c.set_behaviors({"ketama": True, "tcp_nodelay": 5, "remove_failed": 3}),
        {k: v for k, v in c.behaviors.items() if not k.startswith("_socket")},
    ),
    "get_multi": lambda m, c: (
        c.set_multi({"a": 1, "b": "2", b"c": b"3"}),
        c.get_multi(["a", b"b", "c", "missing", "a"]),
    ),
    "get_multi_prefix": lambda m, c: (
        c.set_multi({"a": 1, "b": 2}, key_prefix="p:"),
        c.get_multi(["a", "b", ""], key_prefix="p:"),
        c.get("p:a"),
    ),
    "get_multi_mixed_types": lambda m, c: (c.set("k", 1), c.get_multi(["k", b"k"])),
    "get_multi_str": lambda m, c: (c.set_multi({"a": 1, "c": 3}), c.get_multi("abc")),
    "get_multi_dict": lambda m, c: c.get_multi({"a": 1}),
    "get_multi_empty": lambda m, c: (c.get_multi([]), c.get_multi([""])),
    "get_multi_1000": lambda m, c: (
        c.set_multi({"k%d" % i: i for i in range(1000)}),
        c.get_multi(["k%d" % i for i in range(1000)]) == {"k%d" % i: i for i in range(1000)},
    ),
    "set_multi_failed_list": lambda m, c: (
        c.add_multi({"a": 1}),
        c.add_multi({"a": 2, "b": 3}),
        c.get_multi(["a", "b"]),
    ),
    "add_multi_failed_str_and_bytes": lambda m, c: (
        c.add_multi({"d": 1}),
        c.add_multi({b"d": 2, "d": 3, b"e": 4}),
    ),
    "set_multi_empty_keys": lambda m, c: c.set_multi({"": 1, b"": 2}),
    "set_multi_not_dict": lambda m, c: c.set_multi([("a", 1)]),
    "set_multi_prefixed_too_long": lambda m, c: c.set_multi({"k" * 248: 1}, key_prefix="abc"),
    "delete_multi": lambda m, c: (
        c.set_multi({"a": 1, "b": 2}),
        c.delete_multi(["a", "b"]),
        c.delete_multi(["a"]),
        c.delete_multi([]),
        c.delete_multi(iter(["x"])),
    ),
    "delete_multi_dict": lambda m, c: c.delete_multi({"a": "b"}),
    "delete_multi_prefix": lambda m, c: (
        c.set("p:a", 1),
        c.delete_multi(["a"], key_prefix="p:"),
        c.get("p:a"),
    ),
    "incr_multi": lambda m, c: (
        c.set_multi({"a": 1, "b": 2}),
        c.incr_multi(["a", "b"], delta=5),
        c.get_multi(["a", "b"]),
    ),
    "incr_multi_prefix": lambda m, c: (
        c.set_multi({"a": 1}, key_prefix="p"),
        c.incr_multi(["a"], key_prefix="p"),
        c.get("pa"),
    ),
    "incr_multi_missing": lambda m, c: (c.set("a", 1), c.incr_multi(["a", "x", "y"])),
    "incr_multi_generator": lambda m, c: c.incr_multi(k for k in ["a"]),
    "clone_same_class": lambda m, c: (type(c.clone()).__name__, c.clone().addresses == c.addresses),
    "pool": lambda m, c: _pool(m, c),
}


# the cases whose outcome depends on how keys spread over several servers
MULTI_SERVER_CASES = [
    "hash_index",
    "get_multi",
    "get_multi_1000",
    "set_multi_failed_list",
    "delete_multi",
    "incr_multi",
    "incr_multi_missing",
]


def _pool(m, c):
    pool = m.ClientPool(c, 2)
    out = []
    with pool.reserve() as a, pool.reserve() as b:
        out.append(a is not b)
        try:
            with pool.reserve():
                out.append("third")
        except Exception as e:
            out.append(type(e).__name__)
    tp = m.ThreadMappedPool(c)
    with tp.reserve() as x:
        x.set("tp", 1)
        out.append(len(tp))
    with tp.reserve() as y:
        out.append(y is x)
    return out
