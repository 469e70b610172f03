"""The pylibmc-compatible ``Client`` (the Python layer over the native ``_pylibmc.client``)."""

from . import _fastmc
from .consts import BehaviorDict, distributions, distributions_rvs, hashers, hashers_rvs

server_type_map = {
    "tcp": _fastmc.server_type_tcp,
    "udp": _fastmc.server_type_udp,
    "unix": _fastmc.server_type_unix,
}

_MISS_SENTINEL = object()

_known_behaviors = set(_fastmc.all_behaviors) | set(_fastmc.fastmc_behaviors) | {"namespace"}


def _split_port_weight(rest, port, weight, original):
    # rest is what follows the host: "", ":port" or ":port:weight"
    if not rest:
        return port, weight
    if not rest.startswith(":"):
        raise ValueError(original)
    parts = rest[1:].split(":", 1)
    port = int(parts[0])
    if len(parts) == 2:
        weight = int(parts[1])
    return port, weight


def translate_server_spec(server, port=11211, weight=1):
    """Translate a server spec string to ``(type, address, port, weight)``.

    >>> translate_server_spec("127.0.0.1:22122:2")
    (1, '127.0.0.1', 22122, 2)
    """
    if server.startswith("/"):
        return (_fastmc.server_type_unix, server, 0, 1)
    addr = server
    stype = _fastmc.server_type_tcp
    if addr.startswith("udp:"):
        stype = _fastmc.server_type_udp
        addr = addr[4:]
    if addr.startswith("["):
        end = addr.find("]")
        if end < 0:
            raise ValueError(addr)
        host, rest = addr[1:end], addr[end + 1 :]
        port, weight = _split_port_weight(rest, port, weight, addr)
    else:
        parts = addr.split(":", 2)
        host = parts[0]
        if len(parts) >= 2:
            port = int(parts[1])
        if len(parts) == 3:
            weight = int(parts[2])
    return (stype, host, port, weight)


def translate_server_specs(servers):
    addr_tups = []
    for server in servers:
        if isinstance(server, tuple) and len(server) == 3:
            addr_tups.append(server)
        else:
            addr_tups.append(translate_server_spec(server))
    return addr_tups


def _behaviors_symbolic(behaviors):
    behaviors = behaviors.copy()
    behaviors["hash"] = hashers_rvs[behaviors["hash"]]
    behaviors["distribution"] = distributions_rvs[behaviors["distribution"]]
    return behaviors


def _behaviors_numeric(behaviors):
    if not behaviors:
        return behaviors
    behaviors = behaviors.copy()
    if "_retry_timeout" in behaviors:
        behaviors.setdefault("retry_timeout", behaviors.pop("_retry_timeout"))
    unknown = set(behaviors).difference(_known_behaviors)
    if unknown:
        names = ", ".join(map(str, sorted(unknown, key=str)))
        raise ValueError("unknown behavior names: %s" % (names,))
    if "hash" in behaviors:
        behaviors["hash"] = hashers[behaviors["hash"]]
    if "distribution" in behaviors:
        behaviors["distribution"] = distributions[behaviors["distribution"]]
    if "ketama_hash" in behaviors and behaviors["ketama_hash"] in hashers:
        behaviors["ketama_hash"] = hashers[behaviors["ketama_hash"]]
    return behaviors


class Client(_fastmc.client):
    """A memcached client: pylibmc's API on fastmc's thread-safe, pipelined core.

    One instance may be shared by any number of threads.
    """

    def __init__(
        self,
        servers,
        behaviors=None,
        binary=False,
        username=None,
        password=None,
        *,
        tls=False,
        tls_ca_file=None,
        tls_cert_file=None,
        tls_key_file=None,
        tls_server_name=None,
    ):
        self.binary = binary
        self.addresses = list(servers)
        super().__init__(
            servers=translate_server_specs(self.addresses),
            binary=binary,
            username=username,
            password=password,
            behaviors=_behaviors_numeric(behaviors),
            tls=tls,
            tls_ca_file=tls_ca_file,
            tls_cert_file=tls_cert_file,
            tls_key_file=tls_key_file,
            tls_server_name=tls_server_name,
        )

    def __repr__(self):
        return "%s(%r, binary=%r)" % (self.__class__.__name__, self.addresses, self.binary)

    def __str__(self):
        addrs = ", ".join(map(str, self.addresses))
        return "<%s for %s, binary=%r>" % (self.__class__.__name__, addrs, self.binary)

    def __reduce__(self):
        raise TypeError("cannot pickle %r object" % (self.__class__.__name__,))

    def __getitem__(self, key):
        value = self.get(key, _MISS_SENTINEL)
        if value is _MISS_SENTINEL:
            raise KeyError(key)
        return value

    def __setitem__(self, key, value):
        if not self.set(key, value):
            raise KeyError("failed setting %r" % (key,))

    def __delitem__(self, key):
        if not self.delete(key):
            raise KeyError(key)

    def __contains__(self, key):
        return self.get(key, _MISS_SENTINEL) is not _MISS_SENTINEL

    def get_behaviors(self):
        behaviors = super().get_behaviors()
        return BehaviorDict(self, _behaviors_symbolic(behaviors))

    def set_behaviors(self, behaviors):
        return super().set_behaviors(_behaviors_numeric(behaviors))

    behaviors = property(get_behaviors, set_behaviors)

    @property
    def behaviours(self):
        raise AttributeError("nobody uses british spellings")

    def clone(self):
        obj = super().clone()
        obj.addresses = list(self.addresses)
        obj.binary = self.binary
        return obj
