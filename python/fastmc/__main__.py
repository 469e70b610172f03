"""A small command line for operators, in the spirit of libmemcached's memstat/memcat/memcp/
memrm/memflush::

    python -m fastmc [--servers host:port,...] stats [ARG]
    python -m fastmc get KEY [KEY ...] [--decode [--unpickle]]
    python -m fastmc set KEY VALUE [--time SECONDS] [--type str|bytes|int]   (VALUE "-": stdin)
    python -m fastmc delete KEY [KEY ...]
    python -m fastmc flush [--delay SECONDS]

Servers come from ``--servers``, else the ``MEMCACHED_SERVERS`` environment variable, else
``127.0.0.1:11211``. Exit status: 0 on success, 1 when a key is missing or not stored, 2 on a
usage error, 3 when a server cannot be reached or answers with an error, 4 when ``get --decode``
refuses a stored value (a pickle without ``--unpickle``); every failure prints one line on
standard error, with a reason.

``get`` prints what is stored, as memcached's text protocol shows it (``VALUE KEY FLAGS BYTES``,
then the bytes, then a newline; a compressed value is inflated, at most ``max_inflate``), and
never runs anything from the cache: ``--decode`` prints the value as a Python client reads it
(str, int, bytes, or a JSON or msgpack value); a pickle is refused unless ``--unpickle`` says to
run it.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any

from . import BadKeyProvided, Client, Error, RefusedValueError

EXIT_OK = 0
EXIT_MISSING = 1
EXIT_USAGE = 2
EXIT_SERVER = 3
EXIT_REFUSED = 4

# What a failure says when its exception carries no message (pylibmc raises TooBig bare).
_BARE = {
    "TooBig": "the value is larger than the server's item size limit (memcached -I)",
}

DEFAULT_SERVERS = "127.0.0.1:11211"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m fastmc",
        description="Inspect and edit memcached servers with fastmc.",
    )
    p.add_argument(
        "--servers",
        default=os.environ.get("MEMCACHED_SERVERS", DEFAULT_SERVERS),
        help="comma-separated servers: host[:port[:weight]], [v6addr]:port or a UNIX socket path "
        "(default: $MEMCACHED_SERVERS or %s)" % DEFAULT_SERVERS,
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=2.0,
        help="seconds to wait to connect and for each reply (default: 2)",
    )
    # --servers and --timeout are also accepted after the command (`stats --servers ...`); there
    # they have no default of their own, so the values given before the command stay.
    after = argparse.ArgumentParser(add_help=False)
    after.add_argument("--servers", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    after.add_argument("--timeout", type=float, default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    def command(name: str, help: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=help, parents=[after])

    s = command("stats", help="print each server's statistics")
    s.add_argument("arg", nargs="?", help='a stats group, e.g. "items", "slabs", "settings"')

    g = command("get", help="print each key's flags and stored bytes")
    g.add_argument("keys", nargs="+", metavar="KEY")
    g.add_argument(
        "--decode",
        action="store_true",
        help="print the value as a Python client reads it (a pickle is refused)",
    )
    g.add_argument(
        "--unpickle",
        action="store_true",
        help="with --decode, unpickle pickles: this runs code stored in the cache",
    )

    st = command("set", help="store a value")
    st.add_argument("key", metavar="KEY")
    st.add_argument("value", metavar="VALUE", help='the value; "-" reads it from standard input')
    st.add_argument("--time", type=int, default=0, help="expiry in seconds (default: 0, never)")
    st.add_argument(
        "--type",
        choices=("str", "bytes", "int"),
        default="str",
        help="how to store the value, as a Python client would read it back (default: str)",
    )

    d = command("delete", help="delete keys")
    d.add_argument("keys", nargs="+", metavar="KEY")

    f = command("flush", help="invalidate every item on every server")
    f.add_argument("--delay", type=int, default=0, help="flush after this many seconds")
    return p


def _servers(spec: str) -> list[str]:
    servers = [s.strip() for s in spec.split(",") if s.strip()]
    if not servers:
        raise ValueError("no servers given")
    return servers


class _Stored(Client):
    """Reads (flags, bytes) as stored: nothing is decoded, so nothing can run."""

    def deserialize(self, data: bytes, flags: int) -> Any:
        return flags, data


def _client(args: argparse.Namespace, servers: list[str] | None = None) -> Client:
    ms = max(1, int(args.timeout * 1000))
    behaviors = {"connect_timeout": ms, "_poll_timeout": ms, "retry_timeout": 1}
    servers = servers or _servers(args.servers)
    if args.command == "get" and not args.decode:
        return _Stored(servers, behaviors=behaviors)
    # Pickles only when asked; never with a policy from the environment in the way.
    pickle = "allow" if getattr(args, "unpickle", False) else "refuse"
    return Client(servers, behaviors=behaviors, pickle=pickle, signing_keys=[])


def _write_value(value: Any) -> None:
    if isinstance(value, bytes):
        data = value
    elif isinstance(value, str):
        data = value.encode("utf-8")
    else:
        data = repr(value).encode("utf-8")
    out = sys.stdout.buffer
    out.write(data)
    if not data.endswith(b"\n"):
        out.write(b"\n")
    out.flush()


def _stats(mc: Client, args: argparse.Namespace) -> int:
    # one server at a time, so that a down server does not hide the others' statistics
    status = EXIT_OK
    for server in _servers(args.servers):
        one = _client(args, [server])
        try:
            # every line the server sent, in its order (get_stats keeps pylibmc's 22 fields)
            results = one._stats_lines(args.arg) if args.arg else one._stats_lines()
        except BadKeyProvided:
            raise
        except Error as e:
            _error("%s: %s: %s" % (server, type(e).__name__, _one_line(e)))
            status = EXIT_SERVER
            continue
        for name, lines in results:
            print(name.decode("utf-8", "replace"))
            for key, value in lines:
                print(
                    "  %s: %s" % (key.decode("utf-8", "replace"), value.decode("utf-8", "replace"))
                )
    return status


def _get(mc: Client, args: argparse.Namespace) -> int:
    if args.unpickle and not args.decode:
        raise ValueError("--unpickle goes with --decode")
    found = mc.get_multi(args.keys) if len(args.keys) > 1 else {}
    status = EXIT_OK
    for key in args.keys:
        value = mc.get(key, _MISSING) if len(args.keys) == 1 else found.get(key, _MISSING)
        if value is _MISSING:
            _error("key not found: %s" % key)
            status = EXIT_MISSING
        elif args.decode:
            _write_value(value)
        else:
            flags, data = value
            out = sys.stdout.buffer
            out.write(b"VALUE %s %d %d\n" % (os.fsencode(key), flags, len(data)))
            out.write(data + b"\n")
            out.flush()
    return status


_MISSING = object()


def _set(mc: Client, args: argparse.Namespace) -> int:
    raw = sys.stdin.buffer.read() if args.value == "-" else os.fsencode(args.value)
    value: Any
    if args.type == "bytes":
        value = raw
    elif args.type == "int":
        value = int(raw)
    else:
        value = raw.decode("utf-8")
    if not mc.set(args.key, value, args.time):
        _error("not stored: %s" % args.key)
        return EXIT_MISSING
    return EXIT_OK


def _delete(mc: Client, args: argparse.Namespace) -> int:
    status = EXIT_OK
    for key in args.keys:
        if not mc.delete(key):
            _error("key not found: %s" % key)
            status = EXIT_MISSING
    return status


def _flush(mc: Client, args: argparse.Namespace) -> int:
    if not mc.flush_all(args.delay):
        _error("flush failed")
        return EXIT_SERVER
    return EXIT_OK


_COMMANDS = {"stats": _stats, "get": _get, "set": _set, "delete": _delete, "flush": _flush}


def _error(message: str) -> None:
    print("fastmc: %s" % message, file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    args = _parser().parse_args(argv)
    try:
        mc = _client(args)
        return _COMMANDS[args.command](mc, args)
    except BadKeyProvided as e:
        _error("invalid key: %s" % _one_line(e))
        return EXIT_USAGE
    except RefusedValueError as e:
        hint = " (--unpickle runs it)" if "pickle" in str(e) else ""
        _error("%s%s" % (_one_line(e), hint))
        return EXIT_REFUSED
    except Error as e:
        name = type(e).__name__
        reason = _one_line(e) or _BARE.get(name, "no detail given")
        _error("%s (servers: %s): %s" % (name, args.servers, reason))
        return EXIT_SERVER
    except ValueError as e:
        _error("invalid argument: %s" % _one_line(e))
        return EXIT_USAGE


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split())


if __name__ == "__main__":
    sys.exit(main())
