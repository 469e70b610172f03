"""A public method has five faces: the blocking native class's method and the asyncio core's
``_``-prefixed one, both made from one row of the table in ``src/py/methods.rs`` (or, for a
method that is not one request, the blocking class's ``#[pymethods]`` rows in
``src/py/client/``), their stubs (classes ``client`` and ``aio_client`` in ``_fastmc.pyi``), and
the coroutine of ``fastmc.aio.Client`` (``python/fastmc/aio.py``) that forwards to the core
method. Most coroutines are made from the blocking method at import (``aio._coroutine``: its
signature at run time, its types for mypy through the blocking stub); the rest are written out.
This test holds the five together, for every public method of both clients:

- the blocking class's run-time signature (``__text_signature__``) and its stub: the same
  parameters, kinds and defaults;
- the coroutine and the blocking method: the same parameters, kinds and defaults (pylibmc's
  positional-only arguments stay positional-only), the same annotations where the coroutine is
  written out, and a coroutine function;
- the coroutine forwards each of its arguments to the core method's parameter of the same name
  (called with a distinct object for each argument, the core method replaced by a recorder);
- the core method's run-time signature and its stub: the same parameters, kinds and defaults,
  the stub's annotations those of the blocking stub, and its result ``aio_future[R]`` of the
  blocking method's ``R``; a core default is the blocking one or ``...`` (left out: the blocking
  method's own parsing gives the default).

mypy --strict then types each made coroutine from the blocking stub and checks that each
written-out one's ``await self._x(...)`` has the type it returns (aio.py has no ``type:
ignore``), and stubtest the stubs against the run-time classes. Every difference that is meant
is in the tables below, with its reason."""

import ast
import inspect
from pathlib import Path

import fastmc
import fastmc.aio
import pytest
from fastmc import _fastmc

STUB = Path(fastmc.__file__).with_name("_fastmc.pyi")

# Coroutine -> (the core method it forwards to, the core's other arguments: none since one row
# makes both methods, so the two take the same arguments).
FORWARDS = {
    "get": ("_get", {}),
    "gets": ("_gets", {}),
    "set": ("_set", {}),
    "add": ("_add", {}),
    "replace": ("_replace", {}),
    "append": ("_append", {}),
    "prepend": ("_prepend", {}),
    "cas": ("_cas", {}),
    "delete": ("_delete", {}),
    "touch": ("_touch", {}),
    "incr": ("_incr", {}),
    "decr": ("_decr", {}),
    "get_multi": ("_get_multi", {}),
    "gets_multi": ("_gets_multi", {}),
    "set_multi": ("_set_multi", {}),
    "add_multi": ("_add_multi", {}),
    "replace_multi": ("_replace_multi", {}),
    "delete_multi": ("_delete_multi", {}),
    "incr_multi": ("_incr_multi", {}),
    "touch_multi": ("_touch_multi", {}),
    "flush_all": ("_flush_all", {}),
    "get_stats": ("_get_stats", {}),
    "gat": ("_gat", {}),
    "gat_multi": ("_gat_multi", {}),
    "invalidate_multi": ("_invalidate_multi", {}),
}

# The coroutines aio.py writes out rather than makes with ``_coroutine``: the others must be made.
WRITTEN_OUT = {
    # Its one argument has no default value (see DIFFERENT).
    "get_stats",
    # Deletes the keys of servers without the meta protocol itself.
    "invalidate_multi",
}

# What a recorder's future resolves to where the coroutine looks at the result.
RESULTS = {"_invalidate_multi": (True, [])}

# Coroutines written over other calls rather than forwarded to one core method (their
# signatures are still compared with the blocking ones).
COMPOSED = {
    # invalidate_multi([key], stale_time): the core has no single-key row.
    "invalidate",
    # stampede.aget_or_set, a Python function over _alease_get/_alease_release.
    "get_or_set",
    # the blocking warm_up on a worker thread (run_in_executor): it opens connections.
    "warm_up",
    # the blocking debug on a worker thread: an operator's call.
    "debug",
}

# The blocking client's internal rows and their asyncio twins (used by fastmc.stampede).
INTERNAL_TWINS = {
    "_lease_get": "_alease_get",
    "_lease_release": "_alease_release",
    "_near_check": "_anear_check",
    "_near_cas_multi": "_anear_cas_multi",
}

# Plain methods (no I/O): the same method on both clients, no coroutine.
PLAIN = {
    "on",
    "off",
    "metrics",
    "hot_keys",
    "hash",
    "serialize",
    "deserialize",
    "disconnect_all",
    "get_behaviors",
    "set_behaviors",
    "set_servers",
}

# On one client only, on purpose (docs/aio.md).
BLOCKING_ONLY = {
    # The mapping protocol cannot await.
    "__getitem__",
    "__setitem__",
    "__delitem__",
    "__contains__",
    # pylibmc's joke property.
    "behaviours",
}
# Present on the asyncio client but raising TypeError there (docs/aio.md: not on it).
REFUSED_ON_AIO = {"clone"}
AIO_ONLY = {"close", "__aenter__", "__aexit__", "discovery"}
# Properties, the same on both.
PROPERTIES = {"behaviors", "binary_protocol", "serializer", "dns", "near_cache"}

# Signatures that differ on purpose: {method: reason}.
DIFFERENT = {
    # The blocking ``get_stats(stat_args=..., /)`` has an optional argument with no default
    # value (pylibmc's "|s" format: None is refused); Python spells that ``*stat_args``. A
    # second argument is refused by the core method (_get_stats takes at most one).
    "get_stats": "optional argument without a default",
}

# The core method's stub result that is not aio_future[blocking result], and why.
CORE_RESULTS = {
    # One row serves get_multi and gets_multi; dict[_K, Any] is assignable to both.
    "_get_multi": "aio_future[dict[_K, Any]]",
    # The aio coroutine deletes the keys of servers without the meta protocol itself.
    "_invalidate_multi": "aio_future[tuple[bool, list[_Key]]]",
}


def stub_classes():
    """{class name: {method name: ast.FunctionDef}} of the native module's stub."""
    tree = ast.parse(STUB.read_text())
    out = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            out[node.name] = {f.name: f for f in node.body if isinstance(f, ast.FunctionDef)}
    return out


STUBS = stub_classes()


def stub_default(node):
    """A stub default as a value (``...`` is Ellipsis)."""
    return ast.literal_eval(node)


def shape_of_stub(fn):
    """[(name, kind, default, annotation text)] of a stub function, without ``self``."""
    a = fn.args
    P = inspect.Parameter
    positional = [(arg, P.POSITIONAL_ONLY) for arg in a.posonlyargs]
    positional += [(arg, P.POSITIONAL_OR_KEYWORD) for arg in a.args]
    defaults = [P.empty] * (len(positional) - len(a.defaults)) + [
        stub_default(d) for d in a.defaults
    ]
    out = [
        (arg.arg, kind, default, ast.unparse(arg.annotation) if arg.annotation else None)
        for (arg, kind), default in zip(positional, defaults)
    ]
    if a.vararg:
        out.append((a.vararg.arg, P.VAR_POSITIONAL, P.empty, ast.unparse(a.vararg.annotation)))
    for arg, d in zip(a.kwonlyargs, a.kw_defaults):
        default = P.empty if d is None else stub_default(d)
        out.append((arg.arg, P.KEYWORD_ONLY, default, ast.unparse(arg.annotation)))
    if a.kwarg:
        out.append((a.kwarg.arg, P.VAR_KEYWORD, P.empty, ast.unparse(a.kwarg.annotation)))
    assert out[0][0] in ("self", "cls"), fn.name
    return out[1:]


def shape_of(method):
    """[(name, kind, default, annotation)] of a run-time method, without ``self``."""
    params = list(inspect.signature(method).parameters.values())
    assert params[0].name == "self", method
    out = []
    for p in params[1:]:
        ann = None if p.annotation is inspect.Parameter.empty else p.annotation
        out.append((p.name, p.kind, p.default, ann))
    return out


def without_annotations(shape):
    return [s[:3] for s in shape]


def stub_return(fn):
    return ast.unparse(fn.returns)


def public_names(cls):
    names = {n for n in dir(cls) if not n.startswith("_")}
    dunders = BLOCKING_ONLY | AIO_ONLY
    return names | {n for n in dir(cls) if n.startswith("__") and n in dunders}


# -- every public method is accounted for ------------------------------------------------------


def test_every_public_method_is_in_a_table():
    blocking = public_names(fastmc.Client)
    aio = public_names(fastmc.aio.Client)
    coroutines = set(FORWARDS) | COMPOSED
    assert blocking == coroutines | PLAIN | PROPERTIES | BLOCKING_ONLY | REFUSED_ON_AIO
    assert aio == coroutines | PLAIN | PROPERTIES | AIO_ONLY | REFUSED_ON_AIO
    for name in coroutines:
        assert inspect.iscoroutinefunction(getattr(fastmc.aio.Client, name)), name
    for name in PLAIN:
        assert not inspect.iscoroutinefunction(getattr(fastmc.aio.Client, name)), name


def test_every_core_row_is_forwarded_to():
    """Each ``_``-prefixed method the asyncio core adds is a coroutine's target, a twin of a
    blocking internal row, or the client's own plumbing."""
    added = {n for n in vars(_fastmc.aio_client) if n.startswith("_") and not n.startswith("__")}
    plumbing = {"_shutdown", "_in_flight", "_direct_counts", "_idle_waits"}
    targets = {core for core, _ in FORWARDS.values()}
    assert added == targets | set(INTERNAL_TWINS.values()) | plumbing
    assert set(STUBS["aio_client"]) >= targets | set(INTERNAL_TWINS.values()) | {"_shutdown"}


# -- the blocking method: run time and stub ----------------------------------------------------

NATIVE = sorted((set(FORWARDS) | COMPOSED | PLAIN | INTERNAL_TWINS.keys()) - {"get_or_set"})


@pytest.mark.parametrize("name", NATIVE)
def test_blocking_stub_matches_the_native_class(name):
    runtime = without_annotations(shape_of(getattr(_fastmc.client, name)))
    stub = without_annotations(shape_of_stub(STUBS["client"][name]))
    assert stub == runtime


@pytest.mark.parametrize("name", sorted(PLAIN))
def test_plain_methods_are_the_same_on_both(name):
    blocking = getattr(fastmc.Client, name)
    aio = getattr(fastmc.aio.Client, name)
    assert shape_of(aio) == shape_of(blocking)
    if name in STUBS["aio_client"]:
        assert shape_of_stub(STUBS["aio_client"][name]) == shape_of_stub(STUBS["client"][name])
        assert stub_return(STUBS["aio_client"][name]) == stub_return(STUBS["client"][name])


# -- the coroutine and the blocking method -----------------------------------------------------


def blocking_shape(name):
    """The blocking method's parameters with the stub's annotations (the native class has no
    annotations at run time; a Python-level method has its own)."""
    method = getattr(fastmc.Client, name)
    if name in STUBS["client"] and getattr(_fastmc.client, name, None) is method:
        runtime = shape_of(method)
        stub = shape_of_stub(STUBS["client"][name])
        assert without_annotations(stub) == without_annotations(runtime)
        return stub, stub_return(STUBS["client"][name])
    return shape_of(method), inspect.signature(method).return_annotation


def is_made(coroutine):
    """Whether ``aio._coroutine`` made it (its code is compiled under that name)."""
    return coroutine.__code__.co_filename.startswith("<fastmc.aio.Client.")


def test_forwarding_coroutines_are_made():
    made = {n for n in set(FORWARDS) | COMPOSED if is_made(getattr(fastmc.aio.Client, n))}
    assert made == set(FORWARDS) - WRITTEN_OUT


def test_a_core_row_that_differs_fails_the_import():
    """A core row whose parameters are not the blocking method's (plus the selector) cannot
    become a coroutine, nor can a blocking method with an argument that has no default."""
    with pytest.raises(TypeError, match="_cas does not take set's arguments"):
        fastmc.aio._coroutine(_fastmc.client.set, "_cas")
    with pytest.raises(TypeError, match="_set_multi does not take set's arguments"):
        fastmc.aio._coroutine(_fastmc.client.set, "_set_multi")
    with pytest.raises(TypeError, match="without a default value"):
        fastmc.aio._coroutine(_fastmc.client.get_stats, "_get_stats")


@pytest.mark.parametrize("name", sorted((set(FORWARDS) | COMPOSED) - set(DIFFERENT)))
def test_coroutine_matches_the_blocking_method(name):
    blocking, returns = blocking_shape(name)
    coroutine = getattr(fastmc.aio.Client, name)
    if is_made(coroutine):
        # Its types are the blocking stub's (mypy), its docstring the blocking method's.
        assert shape_of(coroutine) == [(*s[:3], None) for s in blocking]
        assert coroutine.__doc__ == getattr(fastmc.Client, name).__doc__
        assert coroutine.__qualname__ == "Client." + name
        assert coroutine.__module__ == "fastmc.aio"
        return
    assert shape_of(coroutine) == blocking
    assert inspect.signature(coroutine).return_annotation == returns


def test_get_stats_differs_only_in_spelling():
    (param,) = shape_of(_fastmc.client.get_stats)
    assert param[:3] == ("stat_args", inspect.Parameter.POSITIONAL_ONLY, Ellipsis)
    (param,) = shape_of(fastmc.aio.Client.get_stats)
    assert param == ("stat_args", inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.empty, "str")
    assert inspect.signature(fastmc.aio.Client.get_stats).return_annotation == stub_return(
        STUBS["client"]["get_stats"]
    )


# -- the coroutine forwards every argument to the core method -----------------------------------


class Recorded:
    """An awaitable that resolves at once (no event loop needed)."""

    def __init__(self, value):
        self.value = value

    def __await__(self):
        return self.value
        yield  # a generator: ``await`` drives it


def forwarded_call(name):
    """Call coroutine ``name`` with a distinct object per argument, its core method replaced by
    a recorder: (the objects by parameter name, the core method's bound arguments)."""
    core, _ = FORWARDS[name]
    mc = fastmc.aio.Client.__new__(fastmc.aio.Client)
    calls = []

    def record(*args, **kwargs):
        calls.append((args, kwargs))
        return Recorded(RESULTS.get(core))

    mc.__dict__[core] = record
    sent, args, kwargs = {}, [], {}
    for p in inspect.signature(getattr(fastmc.aio.Client, name)).parameters.values():
        if p.name == "self":
            continue
        sent[p.name] = obj = object()
        if p.kind == p.KEYWORD_ONLY:
            kwargs[p.name] = obj
        else:
            args.append(obj)
    coro = getattr(mc, name)(*args, **kwargs)
    with pytest.raises(StopIteration):
        coro.send(None)
    ((a, k),) = calls
    bound = inspect.signature(getattr(_fastmc.aio_client, core)).bind(mc, *a, **k)
    return sent, {n: v for n, v in bound.arguments.items() if n != "self"}


@pytest.mark.parametrize("name", sorted(FORWARDS))
def test_coroutine_forwards_every_argument(name):
    core, fixed = FORWARDS[name]
    sent, received = forwarded_call(name)
    for param, obj in sent.items():
        assert received.pop(param) is obj, f"{name}({param}) -> {core}"
    assert received == fixed


@pytest.mark.parametrize("name", sorted(FORWARDS))
def test_core_defaults_are_the_blocking_ones(name):
    """A core parameter's default is the blocking method's, or ``...``: left out, the blocking
    method's own parsing supplies it."""
    core, fixed = FORWARDS[name]
    blocking = {p[0]: p[2] for p in shape_of(getattr(_fastmc.client, name))}
    for pname, _, default, _ in shape_of(getattr(_fastmc.aio_client, core)):
        if pname in fixed or default is inspect.Parameter.empty or default is Ellipsis:
            continue
        assert default == blocking[pname], f"{core}({pname})"


# -- the core method: run time and stub --------------------------------------------------------

CORE = sorted({core for core, _ in FORWARDS.values()} | set(INTERNAL_TWINS.values()))


@pytest.mark.parametrize("core", CORE)
def test_core_stub_matches_the_core_class(core):
    runtime = without_annotations(shape_of(getattr(_fastmc.aio_client, core)))
    stub = without_annotations(shape_of_stub(STUBS["aio_client"][core]))
    assert stub == runtime


@pytest.mark.parametrize("name", sorted(FORWARDS))
def test_core_stub_annotations_are_the_blocking_ones(name):
    core, fixed = FORWARDS[name]
    blocking = {p[0]: p[3] for p in shape_of_stub(STUBS["client"][name])}
    stub = STUBS["aio_client"][core]
    for pname, _, _, ann in shape_of_stub(stub):
        if pname not in fixed:
            assert ann == blocking[pname], f"{core}({pname})"
    expected = CORE_RESULTS.get(core, "aio_future[%s]" % stub_return(STUBS["client"][name]))
    assert stub_return(stub) == expected


@pytest.mark.parametrize("blocking", sorted(INTERNAL_TWINS))
def test_internal_twins_agree(blocking):
    twin = INTERNAL_TWINS[blocking]
    runtime = shape_of(getattr(_fastmc.client, blocking))
    assert shape_of(getattr(_fastmc.aio_client, twin)) == runtime
    stub = shape_of_stub(STUBS["client"][blocking])
    assert shape_of_stub(STUBS["aio_client"][twin]) == stub
    returns = stub_return(STUBS["client"][blocking])
    assert stub_return(STUBS["aio_client"][twin]) == "aio_future[%s]" % returns


# -- refused on the asyncio client -------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(REFUSED_ON_AIO | set(INTERNAL_TWINS)))
def test_blocking_only_methods_are_refused_on_aio(name):
    mc = fastmc.aio.Client(["127.0.0.1:1"])
    with pytest.raises(TypeError):
        getattr(mc, name)()
