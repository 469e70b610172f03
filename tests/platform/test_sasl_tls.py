"""SASL PLAIN (pylibmc's username/password) against a real memcached started with -S and a SASL
password database made here with Debian's saslpasswd2; and TLS (a fastmc extension) against a
real memcached started with -Z and certificates made here with the openssl CLI."""

import glob
import os
import subprocess
import sys

import fastmc
import pytest
from fakes import AuthRecorder
from memcached import Memcached, sasl_conf_path, sasl_memcached
from threads import run_threads

USER, PASSWORD = "alice", "s3cret pass"


@pytest.fixture(scope="module")
def sasl_server(tmp_path_factory):
    proc = sasl_memcached(tmp_path_factory.mktemp("sasl"), USER, PASSWORD)
    yield proc
    proc.stop()


def test_sasl_every_operation_works(sasl_server):
    mc = fastmc.Client([sasl_server.address], binary=True, username=USER, password=PASSWORD)
    assert mc.set("a", 1) and mc.get("a") == 1
    assert mc.set_multi({"b": "x", "c": [1]}) == []
    assert mc.get_multi(["a", "b", "c", "zz"]) == {"a": 1, "b": "x", "c": [1]}
    assert mc.incr("a", 5) == 6 and mc.touch("a", 100) and mc.delete("a")
    assert mc.flush_all() and len(mc.get_stats()) == 1


def test_sasl_on_every_new_pooled_connection(sasl_server):
    # The server refuses any command on an unauthenticated connection, so each of the many
    # connections the threads open must have authenticated first.
    mc = fastmc.Client([sasl_server.address], binary=True, username=USER, password=PASSWORD)

    def work(t):
        for i in range(50):
            assert mc.set("t%d-%d" % (t, i), i)
            assert mc.get("t%d-%d" % (t, i)) == i

    assert run_threads(work, 8) == []
    # after disconnect_all and a server-side close, new connections authenticate again
    mc.disconnect_all()
    assert mc.get("t0-0") == 0
    assert mc.clone().get("t1-1") == 1


def test_sasl_wrong_password_raises_what_pylibmc_raises(sasl_server):
    for user, pw in [(USER, "wrong"), ("nobody", PASSWORD)]:
        mc = fastmc.Client([sasl_server.address], binary=True, username=user, password=pw)
        for op in (
            lambda c: c.get("a"),
            lambda c: c.set("a", 1),
            lambda c: c.get_multi(["a", "b"]),
        ):
            with pytest.raises(fastmc.Error) as info:
                op(mc)
            # pylibmc: the base class, "error 41 from memcached_get(a): AUTHENTICATION FAILURE"
            assert type(info.value) is fastmc.Error
            assert "error 41 from memcached_" in str(info.value)
            assert "AUTHENTICATION FAILURE" in str(info.value)


def test_sasl_wrong_password_class_matches_real_pylibmc(sasl_server):
    # pylibmc's bundled libsasl2 finds Debian's PLAIN plugin only through SASL_PATH, read at
    # import: run it in a child process.
    plugins = [os.path.dirname(p) for p in glob.glob("/usr/lib/*/sasl2/libplain.so*")]
    if not plugins:
        pytest.fail("Debian's libsasl2-modules (the PLAIN plugin) is missing")
    code = (
        "import pylibmc\n"
        "def run(pw):\n"
        "    mc = pylibmc.Client([%r], binary=True, username=%r, password=pw)\n"
        "    try:\n"
        "        return repr((mc.set('p', 1), mc.get('p')))\n"
        "    except Exception as e:\n"
        "        return type(e).__name__ + ': ' + str(e)\n"
        "print(run(%r))\n"
        "print(run('wrong'))\n"
    ) % (sasl_server.address, USER, PASSWORD)
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env=dict(os.environ, SASL_PATH=plugins[0]),
    ).stdout.splitlines()
    assert out[0] == "(True, 1)"
    assert out[1] == "Error: error 41 from memcached_set: AUTHENTICATION FAILURE"
    mc = fastmc.Client([sasl_server.address], binary=True, username=USER, password="wrong")
    with pytest.raises(fastmc.Error) as info:
        mc.set("p", 1)
    assert type(info.value).__name__ + ": " + str(info.value).split(" (")[0] == out[1]


def test_sasl_constructor_checks_match_pylibmc():
    for kwargs in [
        {"username": "u"},
        {"password": "p"},
        {"username": "u", "password": "p"},
        {"username": b"u", "password": "p", "binary": True},
    ]:
        with pytest.raises(TypeError):
            fastmc.Client(["127.0.0.1:1"], **kwargs)
    assert fastmc.support_sasl is True


def test_nothing_is_sent_before_authentication_succeeds():
    with AuthRecorder(ok=False) as bad:
        mc = fastmc.Client([bad.address], binary=True, username=USER, password="wrong")
        with pytest.raises(fastmc.Error):
            mc.get("k")
        bad.join(5)  # the client hung up
        assert bad.requests == [(0x21, b"PLAIN\0" + USER.encode() + b"\0wrong")]

    with AuthRecorder(ok=True) as good:
        mc = fastmc.Client([good.address], binary=True, username=USER, password=PASSWORD)
        assert mc.get("k") is None
        assert [op for op, _ in good.requests] == [0x21, 0x0D, 0x0A]
        assert good.requests[0][1] == b"PLAIN\0" + USER.encode() + b"\0" + PASSWORD.encode()
        assert good.requests[1][1] == b"k"


# ---------------------------------------------------------------------------------------- TLS


def _openssl(command, cwd):
    """Run openssl with the words of `command` (file names are relative to `cwd`)."""
    subprocess.run(["openssl", *command.split()], cwd=cwd, check=True, capture_output=True)


EC_KEY = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"  # a new P-256 key


def _make_ca(d, name):
    _openssl(
        f"req -x509 {EC_KEY} -keyout {name}.key -out {name}.pem -days 3 -subj /CN={name}"
        " -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign",
        cwd=d,
    )


def _make_leaf(d, name, ca, ext):
    _openssl(f"req {EC_KEY} -keyout {name}.key -out {name}.csr -subj /CN={name}", cwd=d)
    (d / f"{name}.ext").write_text(ext)
    _openssl(
        f"x509 -req -in {name}.csr -CA {ca}.pem -CAkey {ca}.key -CAcreateserial"
        f" -out {name}.pem -days 3 -extfile {name}.ext",
        cwd=d,
    )


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    _make_ca(d, "ca")
    _make_ca(d, "otherca")
    _make_leaf(
        d,
        "server",
        "ca",
        "subjectAltName=DNS:localhost,DNS:memcached.test,IP:127.0.0.1\n"
        "extendedKeyUsage=serverAuth\n",
    )
    _make_leaf(d, "client", "ca", "extendedKeyUsage=clientAuth\n")
    return d


def tls_args(pki, *options):
    """memcached's arguments for TLS with the test server's certificate (and more -o options)."""
    opts = [f"ssl_chain_cert={pki / 'server.pem'}", f"ssl_key={pki / 'server.key'}", *options]
    return ("-Z", "-o", ",".join(opts))


@pytest.fixture(scope="module")
def tls_server(pki):
    proc = Memcached(*tls_args(pki))
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def mtls_server(pki):
    # ssl_verify_mode=3: the client must present a certificate signed by ssl_ca_cert.
    proc = Memcached(*tls_args(pki, f"ssl_ca_cert={pki / 'ca.pem'}", "ssl_verify_mode=3"))
    yield proc
    proc.stop()


@pytest.mark.parametrize("binary", [False, True])
def test_tls_operations_and_big_batches(tls_server, pki, binary):
    mc = fastmc.Client([tls_server.address], binary=binary, tls_ca_file=str(pki / "ca.pem"))
    mc.flush_all()
    assert mc.set("k", {"a": 1}) and mc.get("k") == {"a": 1}
    assert mc.incr("n", 1) if mc.set("n", 1) else False
    # Many small values pipelined: memcached 1.6 stalls if a value's end and the next request
    # share a TLS record (fastmc ends a record after every storage request).
    small = {"s%d" % i: "x" * (1000 + i) for i in range(300)}
    assert mc.set_multi(small) == []
    assert mc.get_multi(list(small)) == small
    # again, now as quiet meta commands (text mode: the first batch probed the server)
    small = {k: v + "y" for k, v in small.items()}
    assert mc.set_multi(small) == [] and mc.add_multi(small) == list(small)
    assert mc.get_multi(list(small)) == small
    # Megabytes each way: the poll loop must flush pending TLS records and drain decrypted data.
    big = {"b%d" % i: ("%d" % i) * 20000 for i in range(400)}
    assert mc.set_multi(big) == []
    assert mc.get_multi([*big, "missing"]) == big
    assert mc.delete_multi(list(big)) is True
    # Sent in pieces (2,048 keys or more): each piece's record ends follow the earlier ones.
    many = {"m%d" % i: "z" * (i % 900) for i in range(5000)}
    assert mc.set_multi(many) == [] and mc.add_multi(many) == list(many)
    assert mc.get_multi(list(many)) == many
    assert mc.delete_multi(list(many)) is True
    assert mc.get_stats()[0][1]["pid"]


def test_tls_with_several_servers_and_threads(pki):
    procs = [Memcached(*tls_args(pki)) for _ in range(2)]
    try:
        mc = fastmc.Client([p.address for p in procs], tls_ca_file=str(pki / "ca.pem"))

        def work(t):
            data = {"t%d-%d" % (t, i): "v" * (i * 37 % 3000) for i in range(300)}
            assert mc.set_multi(data) == []
            assert mc.get_multi(list(data)) == data

        assert run_threads(work, 4) == []
    finally:
        for p in procs:
            p.stop()


def test_tls_wrong_ca_fails_with_a_clear_error(tls_server, pki):
    mc = fastmc.Client([tls_server.address], tls_ca_file=str(pki / "otherca.pem"))
    with pytest.raises(fastmc.ConnectionError) as info:
        mc.get("k")
    assert "TLS handshake" in str(info.value) and "certificate" in str(info.value)
    # the system store does not trust the test CA either (a machine without any system CA
    # certificate fails at construction instead)
    with pytest.raises(fastmc.Error) as info:
        fastmc.Client([tls_server.address], tls=True).get("k")
    assert isinstance(info.value, fastmc.ConnectionError) or "system store" in str(info.value)


def test_tls_server_name(tls_server, pki):
    _, port = tls_server.address.rsplit(":", 1)
    ca = str(pki / "ca.pem")
    # a name in the certificate, different from the address connected to
    assert fastmc.Client(
        [tls_server.address], tls_ca_file=ca, tls_server_name="memcached.test"
    ).set("x", 1)
    assert fastmc.Client(["localhost:" + port], tls_ca_file=ca).get("x") == 1
    with pytest.raises(fastmc.ConnectionError) as info:
        fastmc.Client([tls_server.address], tls_ca_file=ca, tls_server_name="other.test").get("x")
    assert "certificate" in str(info.value)


def test_tls_client_certificate(mtls_server, pki):
    ca = str(pki / "ca.pem")
    mc = fastmc.Client(
        [mtls_server.address],
        tls_ca_file=ca,
        tls_cert_file=str(pki / "client.pem"),
        tls_key_file=str(pki / "client.key"),
    )
    assert mc.set("m", 1) and mc.get("m") == 1
    with pytest.raises((fastmc.ConnectionError, fastmc.ReadError, fastmc.WriteError)):
        fastmc.Client([mtls_server.address], tls_ca_file=ca).set("m", 1)


def test_tls_setup_errors_at_construction(pki):
    with pytest.raises(fastmc.Error, match="TLS setup failed"):
        fastmc.Client(["127.0.0.1:1"], tls_ca_file=str(pki / "missing.pem"))
    with pytest.raises(fastmc.Error, match="both a cert file and a key file"):
        fastmc.Client(
            ["127.0.0.1:1"], tls_ca_file=str(pki / "ca.pem"), tls_cert_file=str(pki / "client.pem")
        )
    with pytest.raises(fastmc.Error, match="TLS setup failed"):
        fastmc.Client(["127.0.0.1:1"], tls_ca_file=str(pki / "ca.pem"), tls_server_name="bad name!")


def test_tls_plaintext_server_fails_cleanly(pki):
    plain = Memcached()
    try:
        mc = fastmc.Client(
            [plain.address], tls_ca_file=str(pki / "ca.pem"), behaviors={"connect_timeout": 2000}
        )
        with pytest.raises(fastmc.ConnectionError):
            mc.get("k")
    finally:
        plain.stop()


@pytest.mark.parametrize("binary", [False, True])
def test_tls_server_restart_is_invisible_and_clones_keep_tls(pki, binary):
    proc = Memcached(*tls_args(pki))
    try:
        mc = fastmc.Client([proc.address], binary=binary, tls_ca_file=str(pki / "ca.pem"))
        assert mc.set("r", 1) and mc.get("r") == 1
        proc.restart()
        # the pooled TLS connection is stale: replayed on a new one (handshake included)
        assert mc.get("r") is None
        assert mc.set("r", 2)
        cl = mc.clone()
        assert cl.get("r") == 2 and cl.set_multi({"c%d" % i: i for i in range(50)}) == []
    finally:
        proc.stop()


def test_sasl_over_tls(pki, sasl_server):
    with sasl_conf_path(sasl_server.sasl_dir):
        proc = Memcached("-S", *tls_args(pki))
    try:
        ca = str(pki / "ca.pem")
        mc = fastmc.Client(
            [proc.address], binary=True, username=USER, password=PASSWORD, tls_ca_file=ca
        )
        assert mc.set("st", "v") and mc.get_multi(["st", "zz"]) == {"st": "v"}
        bad = fastmc.Client(
            [proc.address], binary=True, username=USER, password="nope", tls_ca_file=ca
        )
        with pytest.raises(fastmc.Error, match="AUTHENTICATION FAILURE"):
            bad.get("st")
    finally:
        proc.stop()


def test_discovery_asks_a_tls_endpoint_over_tls(tls_server, pki):
    """Auto-discovery with the client's TLS keywords asks the configuration endpoint over TLS
    too (here memcached itself, which answers ERROR to ``config get``: the legacy key)."""
    import asyncio
    import ssl

    from fastmc.autodiscovery import discover, discover_aio, fetch_config

    ca = str(pki / "ca.pem")
    host, port = tls_server.address.rsplit(":", 1)
    seed = fastmc.Client([tls_server.address], tls_ca_file=ca)
    assert seed.set(
        "AmazonElastiCache:cluster", b"5\nlocalhost|%s|%s\n" % (host.encode(), port.encode())
    )
    try:
        with discover(tls_server.address, interval=3600, tls_ca_file=ca) as mc:
            assert mc.addresses == [tls_server.address]
            assert mc.discovery.config.version == 5
            assert mc.set("via-discovery", 1) and mc.get("via-discovery") == 1

        async def aio():
            amc = await discover_aio(tls_server.address, interval=3600, tls_ca_file=ca)
            try:
                assert await amc.get("via-discovery") == 1
            finally:
                await amc.close()

        asyncio.run(aio())
        wrong = ssl.create_default_context(cafile=str(pki / "otherca.pem"))
        with pytest.raises(ssl.SSLCertVerificationError):
            fetch_config(tls_server.address, ssl_context=wrong)
    finally:
        seed.delete("AmazonElastiCache:cluster")
