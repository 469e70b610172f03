"""``python -m fastmc``: the operators' command line, run as a subprocess against a real memcached
(and against a port where nothing listens)."""

import os
import subprocess
import sys

import fastmc
import pytest
from memcached import free_port
from planted import plant_pickle


@pytest.fixture
def mc(server):
    c = fastmc.Client([server.address])
    c.flush_all()
    return c


def run(*args, servers=None, stdin=None, env=None):
    cmd = [sys.executable, "-m", "fastmc"]
    if servers is not None:
        cmd += ["--servers", servers]
    full_env = dict(os.environ)
    full_env.pop("MEMCACHED_SERVERS", None)
    full_env.update(env or {})
    return subprocess.run(
        cmd + list(args), input=stdin, capture_output=True, timeout=60, env=full_env
    )


def test_set_then_get_as_a_python_client_sees_it(server, mc):
    r = run("set", "greeting", "hello wörld", servers=server.address)
    assert (r.returncode, r.stdout, r.stderr) == (0, b"", b"")
    assert mc.get("greeting") == "hello wörld"  # stored as str, like mc.set(k, "text")
    r = run("get", "greeting", servers=server.address)
    stored = "hello wörld".encode()
    assert (r.returncode, r.stdout) == (0, b"VALUE greeting 16 %d\n%s\n" % (len(stored), stored))
    r = run("get", "greeting", "--decode", servers=server.address)
    assert (r.returncode, r.stdout) == (0, "hello wörld\n".encode())


def test_set_types_stdin_and_expiry(server, mc):
    assert (
        run(
            "set", "raw", "-", "--type", "bytes", servers=server.address, stdin=b"\x00\x01 binary"
        ).returncode
        == 0
    )
    assert mc.get("raw") == b"\x00\x01 binary"
    assert run("set", "n", "41", "--type", "int", servers=server.address).returncode == 0
    assert mc.incr("n") == 42
    assert run("set", "gone", "x", "--time", "-1", servers=server.address).returncode == 0
    assert mc.get("gone") is None
    r = run("get", "n", "--decode", servers=server.address)
    assert r.stdout == b"42\n"


def test_decode_reads_json_and_msgpack_values(server):
    fastmc.Client([server.address], serializer="json").set("js", {"a": [1, 2.5]})
    fastmc.Client([server.address], serializer="msgpack").set("mp", {"b": b"\x00"})
    assert run("get", "js", "--decode", servers=server.address).stdout == b"{'a': [1, 2.5]}\n"
    assert run("get", "mp", "--decode", servers=server.address).stdout == b"{'b': b'\\x00'}\n"
    assert run("get", "js", servers=server.address).stdout == b'VALUE js 1030 13\n{"a":[1,2.5]}\n'


def test_get_several_keys_and_a_missing_one(server, mc):
    mc.set_multi({"a": "1", "b": b"2"})
    r = run("get", "a", "missing", "b", "--decode", servers=server.address)
    assert r.returncode == 1
    assert r.stdout == b"1\n2\n"
    r = run("get", "a", "missing", "b", servers=server.address)
    assert (r.returncode, r.stdout) == (1, b"VALUE a 16 1\n1\nVALUE b 0 1\n2\n")
    assert r.stderr == b"fastmc: key not found: missing\n"


def test_delete(server, mc):
    mc.set("d", 1)
    r = run("delete", "d", servers=server.address)
    assert (r.returncode, r.stderr) == (0, b"")
    assert mc.get("d") is None
    r = run("delete", "d", servers=server.address)
    assert r.returncode == 1
    assert r.stderr == b"fastmc: key not found: d\n"


def test_flush(server, mc):
    mc.set_multi({"x": 1, "y": 2})
    assert run("flush", servers=server.address).returncode == 0
    assert mc.get_multi(["x", "y"]) == {}


def test_stats_and_a_stats_group(server, mc):
    r = run("stats", servers=server.address)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.decode().splitlines()
    assert lines[0] == "%s (0)" % server.address
    fields = dict(line.strip().split(": ", 1) for line in lines[1:])
    assert int(fields["pid"]) == server.proc.pid
    assert fields["version"].count(".") == 2
    assert len(fields) > 22  # every stat the server sent, not pylibmc's 22
    # a group: the server's own lines, in its order
    mc.set("stats-item", "v")
    for group, name in (("settings", "maxbytes"), ("items", "items:"), ("slabs", "active_slabs")):
        r = run("stats", group, servers=server.address)
        assert r.returncode == 0 and r.stdout.decode().startswith(server.address)
        lines = r.stdout.decode().splitlines()[1:]
        assert any(line.strip().startswith(name) for line in lines), (group, lines[:5])
        assert not any(line.strip().startswith("rusage_user") for line in lines)


def test_servers_from_environment(server, mc):
    mc.set("env", "from env")
    r = run("get", "env", "--decode", env={"MEMCACHED_SERVERS": server.address})
    assert (r.returncode, r.stdout) == (0, b"from env\n")


def test_servers_and_timeout_after_the_command(server, mc):
    """The README writes `stats|get|... --servers host:port`: both orders work, and a value given
    after the command wins over the environment."""
    mc.set("after", "yes")
    env = {"MEMCACHED_SERVERS": "127.0.0.1:%d" % free_port()}
    r = run("get", "after", "--servers", server.address, "--timeout", "5", "--decode", env=env)
    assert (r.returncode, r.stdout) == (0, b"yes\n")
    r = run("stats", "--servers", server.address, env=env)
    assert r.returncode == 0 and server.address.encode() in r.stdout
    r = run("set", "k2", "v2", "--servers", server.address)
    assert r.returncode == 0 and mc.get("k2") == "v2"


def test_down_server_is_one_clear_line_and_nonzero():
    down = "127.0.0.1:%d" % free_port()
    for args in (["get", "k"], ["set", "k", "v"], ["delete", "k"], ["flush"], ["stats"]):
        r = run(*args, servers=down)
        assert r.returncode == 3, args
        assert r.stdout == b""
        err = r.stderr.decode()
        assert err.count("\n") == 1 and err.startswith("fastmc: "), err
        assert "CONNECTION FAILURE" in err and down in err, err


def test_stats_reports_the_live_servers_when_one_is_down(server):
    down = "127.0.0.1:%d" % free_port()
    r = run("stats", servers="%s,%s" % (server.address, down))
    assert r.returncode == 3
    assert r.stdout.decode().startswith("%s (0)\n" % server.address)
    assert r.stderr.decode().startswith("fastmc: %s: " % down)


def test_bad_input_is_a_usage_error(server):
    r = run("get", "has space", servers=server.address)
    assert r.returncode == 2 and r.stderr.startswith(b"fastmc: invalid key: ")
    r = run("get", "k", servers="host:notaport")
    assert r.returncode == 2 and r.stderr.startswith(b"fastmc: invalid argument: ")
    r = run("set", "k", "x", "--type", "int", servers=server.address)
    assert r.returncode == 2
    r = run(servers=server.address)
    assert r.returncode == 2 and b"usage:" in r.stderr


def test_get_never_runs_a_pickle_unless_asked(server, mc, tmp_path):
    """An operator inspecting a suspicious key sees its bytes; --decode refuses the pickle, even
    with a permissive policy in the environment; only --unpickle runs it."""
    ran = tmp_path / "ran"
    payload = plant_pickle(server.address, "boom", ran)
    r = run("get", "boom", servers=server.address)
    assert (r.returncode, r.stdout) == (0, b"VALUE boom 1 %d\n%s\n" % (len(payload), payload))
    env = {"FASTMC_PICKLE": "allow"}
    r = run("get", "boom", "--decode", servers=server.address, env=env)
    assert r.returncode == 4 and b"refuses pickles (--unpickle runs it)" in r.stderr
    assert not ran.exists()
    r = run("get", "boom", "--unpickle", servers=server.address)
    assert r.returncode == 2 and b"--unpickle goes with --decode" in r.stderr
    assert not ran.exists()
    r = run("get", "boom", "--decode", "--unpickle", servers=server.address)
    assert r.returncode == 0 and ran.exists()


def test_every_exit_status_and_its_reason(server, mc):
    """docs/integrations.md: 0, 1, 2, 3 and 4, each failure one line with a reason."""
    assert run("set", "ok", "v", servers=server.address).returncode == 0
    r = run("get", "nothing-here", servers=server.address)
    assert r.returncode == 1 and r.stderr == b"fastmc: key not found: nothing-here\n"
    r = run("get", "has space", servers=server.address)
    assert r.returncode == 2 and r.stderr.startswith(b"fastmc: invalid key: ")
    big = b"a" * (2 << 20)
    r = run("set", "big", "-", servers=server.address, stdin=big)
    assert r.returncode == 3
    line = r.stderr.decode()
    assert line.startswith("fastmc: TooBig (servers: %s): " % server.address)
    assert "item size limit" in line and line.count("\n") == 1
    mc.set("pickled", [1, 2])
    r = run("get", "pickled", "--decode", servers=server.address)
    assert r.returncode == 4 and b"(--unpickle runs it)" in r.stderr
    r = run("get", "pickled", "--decode", "--unpickle", servers=server.address)
    assert r.returncode == 0 and r.stdout == b"[1, 2]\n"
