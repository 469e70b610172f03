"""``ConfigEndpoint``: an in-process cluster configuration endpoint, as ElastiCache for memcached
and Memorystore's discovery endpoint serve it, whose node list a test changes at will.

``mode`` says how it answers: ``"config"`` (``config get cluster``, engines 1.4.14 and later),
``"legacy"`` (``ERROR`` to the command, the body in the key ``AmazonElastiCache:cluster``, as
older engines), ``"none"`` (neither: ``ERROR``, then a miss). ``raw`` replaces the whole answer
to every request (malformed replies); ``requests`` counts the requests served."""

import threading

from fakes import LineServer


class ConfigEndpoint(LineServer):
    def __init__(self, servers, version=1, mode="config"):
        self.mode = mode
        self.raw = None
        self.requests = 0
        self._state = threading.Lock()
        self.set_nodes(servers, version)
        super().__init__()

    def set_nodes(self, servers, version=None):
        """Serve `servers` (``host:port`` strings) from now on, as version `version` (the
        current one plus one by default)."""
        with self._state:
            if version is None:
                version = self.version + 1
            self.version = version
            nodes = []
            for i, s in enumerate(servers):
                ip, port = s.rsplit(":", 1)
                nodes.append("node%d.example|%s|%s" % (i, ip, port))
            self.body = ("%d\n%s\n" % (version, " ".join(nodes))).encode()

    def answer(self, line):
        with self._state:
            self.requests += 1
            body = self.body
        if self.raw is not None:
            return self.raw
        if line.startswith(b"config get "):
            if self.mode != "config":
                return b"ERROR\r\n"
            return b"CONFIG cluster 0 %d\r\n%s\r\nEND\r\n" % (len(body), body)
        if line.startswith(b"get "):
            if self.mode != "legacy":
                return b"END\r\n"
            key = line.split()[1]
            return b"VALUE %s 0 %d\r\n%s\r\nEND\r\n" % (key, len(body), body)
        return b"ERROR\r\n"
