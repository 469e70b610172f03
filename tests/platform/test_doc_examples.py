"""Every Python example in README.md and docs/ runs as written, against a real memcached on
127.0.0.1:11211 (the address the examples use). A page's examples run in order in one fresh
interpreter, each after the ones above it, as a reader meets them. An example that cannot run
here is marked in the page, on the line before it, with `<!-- not run: REASON -->` (a server
that requires SASL or TLS certificates, a cloud endpoint, servers at other addresses)."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from memcached import Memcached

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted(
    [ROOT / "README.md", *ROOT.glob("docs/*.md"), *ROOT.glob("docs/*/*.md")],
    key=lambda p: str(p.relative_to(ROOT)),
)
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
NOT_RUN = re.compile(r"<!-- not run: (.+?) -->\s*$")

# Runs a page's examples, in order, in one namespace; prints which one failed.
RUNNER = """
import json, sys, traceback
blocks = json.loads(sys.stdin.read())
ns = {"__name__": "__main__"}
for where, code in blocks:
    try:
        exec(compile(code, where, "exec"), ns)
    except BaseException:
        print("FAILED " + where, file=sys.stderr)
        traceback.print_exc()
        sys.exit(1)
"""


def examples(page):
    """(where, code, why not run) of each Python example of `page`."""
    text = page.read_text()
    out = []
    for m in BLOCK.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        before = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        skip = NOT_RUN.search(before)
        where = "%s:%d" % (page.relative_to(ROOT), line + 1)
        out.append((where, m.group(1), skip.group(1) if skip else None))
    return out


@pytest.fixture(scope="module")
def on_11211():
    m = Memcached(port=11211)
    yield m
    m.stop()


def test_there_are_examples_and_each_skip_says_why():
    found = [e for page in PAGES for e in examples(page)]
    assert len(found) >= 35
    assert all(why.strip() for _, _, why in found if why is not None)


@pytest.mark.parametrize(
    "page",
    [p for p in PAGES if examples(p)],
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_a_pages_examples_run_as_written(page, on_11211, tmp_path):
    runnable = [(where, code) for where, code, why in examples(page) if why is None]
    env = dict(os.environ)
    for name in [n for n in env if n.startswith("FASTMC_")]:
        del env[name]
    # Django's settings examples define CACHES; nothing reads them here.
    out = subprocess.run(
        [sys.executable, "-c", RUNNER],
        input=json.dumps(runnable),
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-3000:]
