"""What anyone who can write to a cache can plant in it, for the value-policy tests
(docs/security.md): raw (bytes, flags) written and read past the client's codec, and a pickle
that runs code when it is loaded."""

import os
import pickle

import fastmc


class Writer(fastmc.Client):
    """Stores (bytes, flags) as given."""

    def serialize(self, value):
        return value


class Raw(fastmc.Client):
    """Reads what is stored: (bytes after inflating, flags)."""

    def deserialize(self, data, flags):
        return data, flags


class Boom:
    """A pickle that runs code when loaded: it creates `path`."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (os.system, ("touch %s" % self.path,))


def plant_pickle(address, key, path):
    """Store, under `key`, a pickle that creates `path` when loaded; returns its bytes."""
    payload = pickle.dumps(Boom(path))
    Writer([address]).set(key, (payload, 1))
    return payload
