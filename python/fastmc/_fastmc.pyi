"""The native module (``_pylibmc`` when fastmc is installed as pylibmc): constants, the
exception hierarchy and the native ``client`` class that :class:`fastmc.Client` extends."""

import asyncio
import contextvars
from collections.abc import Callable, Collection, Generator, Iterable, Mapping, Sequence
from types import GenericAlias
from typing import Any, Final, Generic, Literal, TypeVar, final

from typing_extensions import Self, TypeAlias

__version__: Final[str]
libmemcached_version: Final[str]
libmemcached_version_hex: Final[int]
support_compression: Final[bool]
support_sasl: Final[bool]
server_type_tcp: Final[int]
server_type_udp: Final[int]
server_type_unix: Final[int]
hash_default: Final[int]
hash_md5: Final[int]
hash_crc: Final[int]
hash_fnv1_64: Final[int]
hash_fnv1a_64: Final[int]
hash_fnv1_32: Final[int]
hash_fnv1a_32: Final[int]
hash_hsieh: Final[int]
hash_murmur: Final[int]
hash_jenkins: Final[int]
distribution_modula: Final[int]
distribution_consistent: Final[int]
distribution_consistent_ketama: Final[int]
distribution_random: Final[int]
distribution_consistent_ketama_spy: Final[int]
distribution_consistent_weighted: Final[int]
distribution_virtual_bucket: Final[int]
distribution_consistent_max: Final[int]
all_behaviors: Final[list[str]]
fastmc_behaviors: Final[list[str]]
callback_namespace: Final[int]
all_callbacks: Final[list[str]]
exceptions: list[tuple[str, type[Error]]]

class Error(Exception): ...

MemcachedError = Error

class CacheMiss(Error): ...

class Failure(Error):
    retcode: int

class HostLookupError(Error):
    retcode: int

class ConnectionError(Error):
    retcode: int

class ConnectionBindError(Error):
    retcode: int

class WriteError(Error):
    retcode: int

class ReadError(Error):
    retcode: int

class UnknownReadFailure(Error):
    retcode: int

class ProtocolError(Error):
    retcode: int

class ClientError(Error):
    retcode: int

class ServerError(Error):
    retcode: int

class SocketCreateError(Error):
    retcode: int

class DataExists(Error):
    retcode: int

class DataDoesNotExist(Error):
    retcode: int

class NotFound(Error):
    retcode: int

class AllocationError(Error):
    retcode: int

class SomeErrors(Error):
    retcode: int

class NoServers(Error):
    retcode: int

class UnixSocketError(Error):
    retcode: int

class NotSupportedError(Error):
    retcode: int

class FetchNotFinished(Error):
    retcode: int

class BadKeyProvided(Error):
    retcode: int

class InvalidHostProtocolError(Error):
    retcode: int

class ServerDead(Error):
    retcode: int

class ServerDown(Error):
    retcode: int

class TooBig(Error):
    retcode: int

class UnknownStatKey(Error):
    retcode: int

# fastmc's own: a fetched value the client's value policy refuses (docs/security.md).
class RefusedValueError(Error): ...

# Whether the allow-list unpickler may load a pickle unchecked (for the tests).
def _pickle_is_plain(data: bytes) -> bool: ...

# fastmc's own: the metric table, one (key, Prometheus name, kind, label, help) per key of a
# server's metrics() dict, in its order (docs/operations.md).
def metric_schema() -> list[
    tuple[
        str, str, Literal["counter", "gauge", "histogram"], Literal["family", "class"] | None, str
    ]
]: ...

# A zstd dictionary trained on samples (fastmc.values.train_zstd_dict).
def _zstd_train(samples: Sequence[bytes], size: int) -> bytes: ...

# A key: text (encoded as UTF-8) or bytes.
_Key: TypeAlias = str | bytes
# The multi-key methods answer with the key objects they were given (without the prefix).
_K = TypeVar("_K", bound=str | bytes)
# What an ``aio_future`` resolves to.
_T_co = TypeVar("_T_co", covariant=True)
# A server as pylibmc takes it: "host", "host:port", "host:port:weight", "[v6]:port", a UNIX
# socket path, or a (type, host, port) / (type, host, port, weight) tuple (type: server_type_*).
_ServerSpec: TypeAlias = str | tuple[int, str, int] | tuple[int, str, int, int]
# Behavior values are ints (bools accepted), names for "hash"/"distribution", a str "namespace".
_Behaviors: TypeAlias = Mapping[str, Any]

class client:
    """The native memcached client (pylibmc's ``_pylibmc.client``)."""
    def __new__(cls, *_args: Any, **_kwargs: Any) -> Self: ...
    def __init__(
        self,
        servers: Iterable[_ServerSpec],
        binary: bool | None = None,
        username: str | None = None,
        password: str | None = None,
        behaviors: _Behaviors | None = None,
        *,
        tls: bool = False,
        tls_ca_file: str | None = None,
        tls_cert_file: str | None = None,
        tls_key_file: str | None = None,
        tls_server_name: str | None = None,
        pickle: str = "allow",
        signing_keys: Sequence[bytes] = ...,
        accept_unsigned_pickles: bool = False,
        pickle_loads: Callable[[bytes], Any] | None = None,
        compression: str = "zlib",
        zstd_level: int = 3,
        zstd_dict: bytes | None = None,
        zstd_min_len: int = 0,
        serializer: str = "pickle",
    ) -> None: ...
    @property
    def binary_protocol(self) -> bool: ...
    @property
    def serializer(self) -> str: ...
    def get(self, key: _Key, default: Any = None, /, server_key: _Key | None = None) -> Any: ...
    def gets(self, key: _Key, /, server_key: _Key | None = None) -> tuple[Any, int | None]: ...
    def set(
        self,
        key: _Key,
        val: Any,
        time: int = 0,
        min_compress_len: int = 0,
        compress_level: int = -1,
        *,
        noreply: bool = False,
        server_key: _Key | None = None,
    ) -> bool: ...
    def add(
        self,
        key: _Key,
        val: Any,
        time: int = 0,
        min_compress_len: int = 0,
        compress_level: int = -1,
        *,
        noreply: bool = False,
        server_key: _Key | None = None,
    ) -> bool: ...
    def replace(
        self,
        key: _Key,
        val: Any,
        time: int = 0,
        min_compress_len: int = 0,
        compress_level: int = -1,
        *,
        noreply: bool = False,
        server_key: _Key | None = None,
    ) -> bool: ...
    def append(
        self,
        key: _Key,
        val: Any,
        time: int = 0,
        min_compress_len: int = 0,
        compress_level: int = -1,
        *,
        noreply: bool = False,
        server_key: _Key | None = None,
    ) -> bool: ...
    def prepend(
        self,
        key: _Key,
        val: Any,
        time: int = 0,
        min_compress_len: int = 0,
        compress_level: int = -1,
        *,
        noreply: bool = False,
        server_key: _Key | None = None,
    ) -> bool: ...
    def cas(
        self, key: _Key, val: Any, cas: int, time: int = 0, *, server_key: _Key | None = None
    ) -> bool: ...
    def delete(
        self, key: _Key, /, *, noreply: bool = False, server_key: _Key | None = None
    ) -> bool: ...
    def touch(
        self, key: _Key, time: int, /, *, noreply: bool = False, server_key: _Key | None = None
    ) -> bool: ...
    def incr(
        self,
        key: _Key,
        delta: int = 1,
        /,
        *,
        initial: int | None = None,
        time: int = 0,
        server_key: _Key | None = None,
    ) -> int: ...
    def decr(
        self,
        key: _Key,
        delta: int = 1,
        /,
        *,
        initial: int | None = None,
        time: int = 0,
        server_key: _Key | None = None,
    ) -> int: ...
    def get_multi(
        self, keys: Collection[_K], key_prefix: _Key = b"", server_key: _Key | None = None
    ) -> dict[_K, Any]: ...
    def gets_multi(
        self, keys: Collection[_K], key_prefix: _Key = b"", server_key: _Key | None = None
    ) -> dict[_K, tuple[Any, int]]: ...
    def set_multi(
        self,
        keys: Mapping[_K, Any],
        time: int = 0,
        key_prefix: _Key = b"",
        min_compress_len: int = 0,
        compress_level: int = -1,
        *,
        noreply: bool = False,
        server_key: _Key | None = None,
    ) -> list[_K]: ...
    def add_multi(
        self,
        keys: Mapping[_K, Any],
        time: int = 0,
        key_prefix: _Key = b"",
        min_compress_len: int = 0,
        compress_level: int = -1,
        *,
        noreply: bool = False,
        server_key: _Key | None = None,
    ) -> list[_K]: ...
    def replace_multi(
        self,
        keys: Mapping[_K, Any],
        time: int = 0,
        key_prefix: _Key = b"",
        min_compress_len: int = 0,
        compress_level: int = -1,
        *,
        noreply: bool = False,
        server_key: _Key | None = None,
    ) -> list[_K]: ...
    def delete_multi(
        self,
        keys: Collection[_Key],
        key_prefix: _Key = b"",
        *,
        noreply: bool = False,
        server_key: _Key | None = None,
    ) -> bool: ...
    def incr_multi(
        self,
        keys: Collection[_Key],
        key_prefix: _Key = b"",
        delta: int = 1,
        *,
        server_key: _Key | None = None,
    ) -> None: ...
    def touch_multi(
        self,
        keys: Collection[_K],
        time: int = 0,
        key_prefix: _Key = b"",
        *,
        noreply: bool = False,
        server_key: _Key | None = None,
    ) -> list[_K]: ...
    def gat(
        self, key: _Key, time: int, default: Any = None, *, server_key: _Key | None = None
    ) -> Any: ...
    def gat_multi(
        self,
        keys: Collection[_K],
        time: int,
        key_prefix: _Key = b"",
        *,
        server_key: _Key | None = None,
    ) -> dict[_K, Any]: ...
    def invalidate(
        self, key: _Key, stale_time: int = 0, *, server_key: _Key | None = None
    ) -> bool: ...
    def invalidate_multi(
        self,
        keys: Collection[_Key],
        stale_time: int = 0,
        key_prefix: _Key = b"",
        *,
        server_key: _Key | None = None,
    ) -> bool: ...
    def _lease_get(
        self, key: _Key, lease: int, recache: int, server_key: _Key | None = None
    ) -> tuple[str, Any, int]: ...
    def _lease_release(
        self, key: _Key, cas: int, stale: bool, server_key: _Key | None = None
    ) -> bool: ...
    def _near_check(
        self, key: _Key, cas: int, conditional: bool, server_key: _Key | None = None
    ) -> tuple[str, Any, int, int]: ...
    def _near_cas_multi(self, keys: list[_Key], server_key: _Key | None = None) -> list[int]: ...
    def _invalidate_multi(
        self,
        keys: Collection[_Key],
        stale_time: int = 0,
        key_prefix: _Key = ...,
        server_key: _Key | None = None,
    ) -> tuple[bool, list[_Key]]: ...
    def flush_all(self, time: int = 0) -> bool: ...
    def get_stats(self, stat_args: str = ..., /) -> list[tuple[bytes, dict[str, bytes]]]: ...
    def _stats_lines(
        self, stat_args: str = ..., /
    ) -> list[tuple[bytes, list[tuple[bytes, bytes]]]]: ...
    def on(self, event: str, callback: Callable[[str, str, str | None], object]) -> None: ...
    def off(self, event: str, callback: Callable[[str, str, str | None], object]) -> bool: ...
    def set_servers(self, servers: Iterable[_ServerSpec]) -> tuple[list[str], list[str]]: ...
    def metrics(self) -> dict[str, dict[str, Any]]: ...
    def hot_keys(self, reset: bool = False) -> dict[str, list[tuple[bytes, int, int]]]: ...
    def _hot_rank(self, key: _Key, server_key: _Key | None = None) -> tuple[int, int] | None: ...
    def disconnect_all(self) -> None: ...
    def warm_up(self, connections: int = 1) -> dict[str, Exception]: ...
    def clone(self) -> Self: ...
    def debug(self, key: _Key, *, server_key: _Key | None = None) -> dict[str, Any] | None: ...
    def hash(self, key: _Key, /) -> int: ...
    def serialize(self, value: Any, /) -> tuple[bytes, int]: ...
    def deserialize(self, data: bytes, flags: int, /) -> Any: ...
    def get_behaviors(self) -> dict[str, Any]: ...
    def set_behaviors(self, behaviors: _Behaviors) -> None: ...

class aio_mailbox:
    def fileno(self) -> int: ...

class aio_direct:
    def fileno(self) -> int: ...

@final
class aio_reader:
    """A reader of the client's descriptors for the event loop (see ``_attach_loop``)."""

    def __new__(
        cls,
        client: Callable[[], object],
        owner: aio_mailbox | aio_direct,
        event_loop: asyncio.AbstractEventLoop,
    ) -> Self: ...
    def __call__(self, *args: object, **kwargs: object) -> None: ...

@final
class aio_future(Generic[_T_co]):
    """What the ``_``-prefixed methods of :class:`aio_client` return: a future to asyncio
    (``asyncio.isfuture`` is true) of the blocking method's result, resolved by the client
    only. Subscriptable at run time, as ``asyncio.Future`` is."""

    _asyncio_future_blocking: bool
    def __class_getitem__(cls, item: Any) -> GenericAlias: ...
    @property
    def _loop(self) -> asyncio.AbstractEventLoop: ...
    def get_loop(self) -> asyncio.AbstractEventLoop: ...
    def done(self) -> bool: ...
    def cancelled(self) -> bool: ...
    def result(self) -> _T_co: ...
    def exception(self) -> BaseException | None: ...
    def add_done_callback(
        self,
        fn: Callable[[aio_future[_T_co]], object],
        *,
        context: contextvars.Context | None = None,
    ) -> None: ...
    def remove_done_callback(self, fn: Callable[[aio_future[_T_co]], object]) -> int: ...
    def cancel(self, msg: Any | None = None) -> bool: ...
    def __await__(self) -> Generator[Any, None, _T_co]: ...
    def __iter__(self) -> Generator[Any, None, _T_co]: ...
    def __next__(self) -> Any: ...

class aio_client:
    """The native base of :class:`fastmc.aio.Client`: the blocking client's construction,
    behaviors and codec, and ``_``-prefixed methods that return asyncio futures. At run time it
    subclasses :class:`client`; the stub leaves that out because the coroutines of
    :class:`fastmc.aio.Client` replace the blocking methods under the same names."""

    def __new__(cls, *_args: Any, **_kwargs: Any) -> Self: ...
    def __init__(
        self,
        servers: Iterable[tuple[int, str, int] | tuple[int, str, int, int]],
        binary: bool | None = None,
        username: str | None = None,
        password: str | None = None,
        behaviors: _Behaviors | None = None,
        *,
        tls: bool = False,
        tls_ca_file: str | None = None,
        tls_cert_file: str | None = None,
        tls_key_file: str | None = None,
        tls_server_name: str | None = None,
        pickle: str = "allow",
        signing_keys: Sequence[bytes] = ...,
        accept_unsigned_pickles: bool = False,
        pickle_loads: Callable[[bytes], Any] | None = None,
        compression: str = "zlib",
        zstd_level: int = 3,
        zstd_dict: bytes | None = None,
        zstd_min_len: int = 0,
        serializer: str = "pickle",
    ) -> None: ...
    @property
    def binary_protocol(self) -> bool: ...
    @property
    def _in_flight(self) -> int: ...
    @property
    def _direct_counts(self) -> tuple[int, int]: ...
    @property
    def _idle_waits(self) -> tuple[int, int, int]: ...
    def on(self, event: str, callback: Callable[[str, str, str | None], object]) -> None: ...
    def off(self, event: str, callback: Callable[[str, str, str | None], object]) -> bool: ...
    def set_servers(self, servers: Iterable[_ServerSpec]) -> tuple[list[str], list[str]]: ...
    def metrics(self) -> dict[str, dict[str, Any]]: ...
    def hot_keys(self, reset: bool = False) -> dict[str, list[tuple[bytes, int, int]]]: ...
    def _hot_rank(self, key: _Key, server_key: _Key | None = None) -> tuple[int, int] | None: ...
    def disconnect_all(self) -> None: ...
    def warm_up(self, connections: int = 1) -> dict[str, Exception]: ...
    def debug(self, key: _Key, *, server_key: _Key | None = None) -> dict[str, Any] | None: ...
    def hash(self, key: _Key, /) -> int: ...
    def serialize(self, value: Any, /) -> tuple[bytes, int]: ...
    def deserialize(self, data: bytes, flags: int, /) -> Any: ...
    def get_behaviors(self) -> dict[str, Any]: ...
    def set_behaviors(self, behaviors: _Behaviors) -> None: ...
    # Each returns a future of what the blocking method of the same name without the ``_``
    # returns, and takes its arguments (one table makes both: src/py/methods.rs). fastmc.aio
    # forwards to them.
    def _get_multi(
        self, keys: Collection[_K], key_prefix: _Key = b"", server_key: _Key | None = None
    ) -> aio_future[dict[_K, Any]]: ...
    def _gets_multi(
        self, keys: Collection[_K], key_prefix: _Key = b"", server_key: _Key | None = None
    ) -> aio_future[dict[_K, tuple[Any, int]]]: ...
    def _set_multi(
        self,
        keys: Mapping[_K, Any],
        time: int = 0,
        key_prefix: _Key = b"",
        min_compress_len: int = 0,
        compress_level: int = -1,
        *,
        noreply: bool = False,
        server_key: _Key | None = None,
    ) -> aio_future[list[_K]]: ...
    def _add_multi(
        self,
        keys: Mapping[_K, Any],
        time: int = 0,
        key_prefix: _Key = b"",
        min_compress_len: int = 0,
        compress_level: int = -1,
        *,
        noreply: bool = False,
        server_key: _Key | None = None,
    ) -> aio_future[list[_K]]: ...
    def _replace_multi(
        self,
        keys: Mapping[_K, Any],
        time: int = 0,
        key_prefix: _Key = b"",
        min_compress_len: int = 0,
        compress_level: int = -1,
        *,
        noreply: bool = False,
        server_key: _Key | None = None,
    ) -> aio_future[list[_K]]: ...
    def _delete_multi(
        self,
        keys: Collection[_Key],
        key_prefix: _Key = b"",
        *,
        noreply: bool = False,
        server_key: _Key | None = None,
    ) -> aio_future[bool]: ...
    def _incr_multi(
        self,
        keys: Collection[_Key],
        key_prefix: _Key = b"",
        delta: int = 1,
        *,
        server_key: _Key | None = None,
    ) -> aio_future[None]: ...
    def _touch_multi(
        self,
        keys: Collection[_K],
        time: int = 0,
        key_prefix: _Key = b"",
        *,
        noreply: bool = False,
        server_key: _Key | None = None,
    ) -> aio_future[list[_K]]: ...
    def _flush_all(self, time: int = 0) -> aio_future[bool]: ...
    def _get_stats(
        self, stat_args: str = ..., /
    ) -> aio_future[list[tuple[bytes, dict[str, bytes]]]]: ...
    def _gat_multi(
        self,
        keys: Collection[_K],
        time: int,
        key_prefix: _Key = b"",
        *,
        server_key: _Key | None = None,
    ) -> aio_future[dict[_K, Any]]: ...
    def _get(
        self, key: _Key, default: Any = None, /, server_key: _Key | None = None
    ) -> aio_future[Any]: ...
    def _gets(
        self, key: _Key, /, server_key: _Key | None = None
    ) -> aio_future[tuple[Any, int | None]]: ...
    def _set(
        self,
        key: _Key,
        val: Any,
        time: int = 0,
        min_compress_len: int = 0,
        compress_level: int = -1,
        *,
        noreply: bool = False,
        server_key: _Key | None = None,
    ) -> aio_future[bool]: ...
    def _add(
        self,
        key: _Key,
        val: Any,
        time: int = 0,
        min_compress_len: int = 0,
        compress_level: int = -1,
        *,
        noreply: bool = False,
        server_key: _Key | None = None,
    ) -> aio_future[bool]: ...
    def _replace(
        self,
        key: _Key,
        val: Any,
        time: int = 0,
        min_compress_len: int = 0,
        compress_level: int = -1,
        *,
        noreply: bool = False,
        server_key: _Key | None = None,
    ) -> aio_future[bool]: ...
    def _append(
        self,
        key: _Key,
        val: Any,
        time: int = 0,
        min_compress_len: int = 0,
        compress_level: int = -1,
        *,
        noreply: bool = False,
        server_key: _Key | None = None,
    ) -> aio_future[bool]: ...
    def _prepend(
        self,
        key: _Key,
        val: Any,
        time: int = 0,
        min_compress_len: int = 0,
        compress_level: int = -1,
        *,
        noreply: bool = False,
        server_key: _Key | None = None,
    ) -> aio_future[bool]: ...
    def _cas(
        self, key: _Key, val: Any, cas: int, time: int = 0, *, server_key: _Key | None = None
    ) -> aio_future[bool]: ...
    def _delete(
        self, key: _Key, /, *, noreply: bool = False, server_key: _Key | None = None
    ) -> aio_future[bool]: ...
    def _touch(
        self, key: _Key, time: int, /, *, noreply: bool = False, server_key: _Key | None = None
    ) -> aio_future[bool]: ...
    def _incr(
        self,
        key: _Key,
        delta: int = 1,
        /,
        *,
        initial: int | None = None,
        time: int = 0,
        server_key: _Key | None = None,
    ) -> aio_future[int]: ...
    def _decr(
        self,
        key: _Key,
        delta: int = 1,
        /,
        *,
        initial: int | None = None,
        time: int = 0,
        server_key: _Key | None = None,
    ) -> aio_future[int]: ...
    def _gat(
        self, key: _Key, time: int, default: Any = None, *, server_key: _Key | None = None
    ) -> aio_future[Any]: ...
    # dict[_K, Any] serves both: gets_multi's values are (value, cas) pairs.
    def _alease_get(
        self, key: _Key, lease: int, recache: int, server_key: _Key | None = None
    ) -> aio_future[tuple[str, Any, int]]: ...
    def _alease_release(
        self, key: _Key, cas: int, stale: bool, server_key: _Key | None = None
    ) -> aio_future[bool]: ...
    def _anear_check(
        self, key: _Key, cas: int, conditional: bool, server_key: _Key | None = None
    ) -> aio_future[tuple[str, Any, int, int]]: ...
    def _anear_cas_multi(
        self, keys: list[_Key], server_key: _Key | None = None
    ) -> aio_future[list[int]]: ...
    # (every key found, the keys on servers without the meta protocol, to delete instead)
    def _invalidate_multi(
        self,
        keys: Collection[_Key],
        stale_time: int = 0,
        key_prefix: _Key = ...,
        server_key: _Key | None = None,
    ) -> aio_future[tuple[bool, list[_Key]]]: ...
    def _shutdown(self) -> None: ...

# fastmc.testing's fake server, in Rust (src/fake/, src/py/fake.rs)
@final
class fake_clock:
    frozen: bool
    def __new__(cls, start: float | None = None, frozen: bool = True) -> Self: ...
    def time(self) -> float: ...
    def now(self) -> int: ...
    def unix_now(self) -> int: ...
    def advance(self, seconds: float) -> None: ...

@final
class fake_session:
    @property
    def closing(self) -> bool: ...
    def feed(self, data: bytes) -> bytes: ...

@final
class fake_core:
    out_of_memory: bool
    def __new__(cls, clock: fake_clock, item_size_max: int, version: str) -> Self: ...
    @property
    def accepted(self) -> int: ...
    def session(self) -> fake_session: ...
    def register(self, host: str, port: int) -> None: ...
    def unregister(self, host: str, port: int) -> None: ...
    def items(self) -> dict[bytes, tuple[bytes, int, int | None]]: ...
    def flush(self) -> None: ...
    def slow(self, seconds: float) -> None: ...
    def set_down(self, down: bool) -> None: ...
    def drop_connections(self) -> None: ...
