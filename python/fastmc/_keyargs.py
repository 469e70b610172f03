"""Where each key method of the clients finds its keys among its arguments: one table for the
code that wraps the methods (the tracing integration's span attributes, the near cache's
writes). ``KEY``: the first argument is one key; ``KEYS``: the first is a collection or a
mapping of keys, with ``key_prefix`` at the given position; None: no key."""

from __future__ import annotations

from typing import Any

KEY = "key"
KEYS = "keys"

METHODS: dict[str, tuple[str | None, int]] = {
    **{
        name: (KEY, -1)
        for name in (
            "get",
            "gets",
            "set",
            "add",
            "replace",
            "append",
            "prepend",
            "cas",
            "delete",
            "touch",
            "incr",
            "decr",
            "gat",
            "invalidate",
            "get_or_set",
        )
    },
    **{name: (KEYS, 1) for name in ("get_multi", "gets_multi", "delete_multi", "incr_multi")},
    **{
        name: (KEYS, 2)
        for name in (
            "set_multi",
            "add_multi",
            "replace_multi",
            "touch_multi",
            "gat_multi",
            "invalidate_multi",
        )
    },
    "flush_all": (None, -1),
    "get_stats": (None, -1),
}

# The methods that only read items (the others change them: a value, an expiry, a stale mark).
READS = frozenset({"get", "gets", "get_multi", "gets_multi", "get_or_set", "get_stats"})


def call_keys(name: str, args: tuple[Any, ...], kwargs: Any) -> tuple[Any, Any]:
    """``(keys, key_prefix)`` of a call of method ``name``: a 1-tuple for a one-key method, the
    caller's own collection or mapping for a multi-key one (``key_prefix`` as given, ``b""``
    by default), ``()`` for a method without keys. Raises (KeyError, IndexError) for a call
    that names no keys, which the method itself refuses."""
    where, prefix_at = METHODS[name]
    if where == KEY:
        return (args[0] if args else kwargs["key"],), b""
    if where == KEYS:
        keys = args[0] if args else kwargs["keys"]
        return keys, args[prefix_at] if len(args) > prefix_at else kwargs.get("key_prefix", b"")
    return (), b""
