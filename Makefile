# Everything goes through here: `make bench` (the main job) and `make test` (every check).
# Both set up what they need on a fresh Debian machine: memcached and nutcracker from Debian's packages and a
# virtualenv (.venv) with maturin, pytest and the peers from PyPI.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
export VIRTUAL_ENV := $(abspath $(VENV))
export PATH := $(abspath $(BIN)):$(PATH)

.PHONY: help test bench bench-full develop develop-release lint check-rust pytest memcached venv \
	fuzz soak random-diff wheels clean bench-net bench-net-soak net-tools test-sid test-pypy bench-pypy test-py314 \
	test-py315 memcached-proxy ends django-matrix

help: ## list the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | expand -t 18

# --no-cache-dir: the wheels are installed, not also kept in pip's cache (about half the disk this
# takes; a CI machine once ran out of space here).
$(BIN)/.installed: requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --no-cache-dir --upgrade pip
	$(BIN)/pip install -q --no-cache-dir -r requirements-dev.txt
	touch $@

venv: $(BIN)/.installed ## the virtualenv with maturin, pytest, the linters and the peers

memcached: ## Debian's memcached, nutcracker (twemproxy), sasl2-bin, openssl, dnsmasq and strace, when missing
	@command -v memcached >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq memcached >/dev/null)
	@{ command -v nutcracker || [ -x /usr/sbin/nutcracker ]; } >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq nutcracker >/dev/null)
	@{ [ -x /usr/sbin/saslpasswd2 ] && command -v openssl >/dev/null 2>&1 && ls /usr/lib/*/sasl2/libplain.so* >/dev/null 2>&1; } || (apt-get update -qq && apt-get install -y -qq sasl2-bin libsasl2-modules openssl >/dev/null)
	@{ command -v dnsmasq || [ -x /usr/sbin/dnsmasq ]; } >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq dnsmasq-base >/dev/null)
	@command -v strace >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq strace >/dev/null)

# memcached's built-in proxy (routes in Lua) for tests/proxy/test_memcached_proxy.py: bookworm's
# memcached is built without it, so sid's memcached and the few libraries it links are fetched
# by apt-get (a private state in target/sid-memcached, checked against Debian's archive keyring)
# and unpacked with dpkg-deb, then run with their own loader: no root, no chroot, about 15 s.
# `make test` makes it first; a bare pytest run skips those tests without it.
memcached-proxy: ## memcached 1.6 with its built-in proxy, from Debian sid's packages, in target/sid-memcached
	$(PYTHON) tests/support/sid_memcached.py

# Tests and lints run on the debug profile (it builds in seconds; nothing in the test suite
# measures speed). Benchmarks build the release profile (fat LTO).
develop: venv ## build the extension into the venv (debug profile)
	$(BIN)/maturin develop -q

develop-release: venv ## build the extension into the venv (release profile, for benchmarks)
	$(BIN)/maturin develop --release -q

# The crate must keep building for macOS, which nothing here can run: clippy for both macOS
# targets (a check, no link), ring's C compiled by zig from the venv (release/zig-cc), and PyO3
# told the CPython version it cannot ask a macOS interpreter for. rustup adds the targets.
DARWIN_TARGETS := aarch64-apple-darwin x86_64-apple-darwin

check-rust: venv ## cargo fmt, clippy -D warnings (with the [lints] table, Linux and macOS), cargo test; netdelay's fmt and clippy
	cargo fmt --check
	cargo clippy --all-targets -- -D warnings
	@for t in $(DARWIN_TARGETS); do rustup target list --installed | grep -qx $$t || rustup target add $$t; done
	CC_aarch64_apple_darwin=$(abspath release/zig-cc) CC_x86_64_apple_darwin=$(abspath release/zig-cc) \
		PYO3_CROSS_PYTHON_VERSION=3.13 \
		cargo clippy $(addprefix --target ,$(DARWIN_TARGETS)) --all-targets -- -D warnings
	cargo test -q
	cargo fmt --check --manifest-path benches/netdelay/Cargo.toml
	cargo clippy --manifest-path benches/netdelay/Cargo.toml -- -D warnings

lint: venv develop ## ruff check and format, stubtest, mypy --strict
	$(BIN)/ruff check python tests benches examples release
	$(BIN)/ruff format --check python tests benches examples release
	$(BIN)/python -m mypy.stubtest fastmc --allowlist stubtest-allowlist.txt --mypy-config-file pyproject.toml
	$(BIN)/mypy --strict python/fastmc examples/typed_usage.py

pytest: memcached memcached-proxy venv develop ## the Python test suite against real memcached servers
	$(BIN)/python -m pytest -q tests

# An import, a round trip and install_as_pylibmc() on the oldest and the newest CPython this
# machine runs as it is (pyenv's 3.9 and 3.13): a debug wheel for each, installed by pip into a
# fresh venv, then release/smoke.py against a plain and a TLS memcached (about a minute).
ends: memcached venv ## the smoke test of release/smoke.py on CPython 3.9 and 3.13 (pyenv's)
	$(BIN)/python release/ends.py

# Django's own cache tests on each supported Django, each on a CPython it supports (Django 6 needs
# 3.12 or later): a wheel per CPython into a fresh venv, Django from PyPI. `make test` runs 5.2.
django-matrix: memcached venv ## Django's own cache tests on Django 5.2, 6.0 and 6.1 (pyenv's CPython 3.12 and 3.13; a few minutes)
	$(BIN)/python release/django_matrix.py

test: memcached venv check-rust develop lint pytest ends ## every check and test (what CI runs)

bench: memcached venv develop-release ## the quick side-by-side benchmark (about five minutes)
	$(BIN)/python benches/bench.py --quick $(if $(SERVERS),--servers $(SERVERS))

bench-full: memcached venv develop-release ## the full benchmark (the figures in the README)
	$(BIN)/python benches/bench.py $(if $(SERVERS),--servers $(SERVERS))

# Over a simulated datacenter network (needs root): two network namespaces joined by a veth pair,
# every packet held by benches/netdelay (an NFQUEUE program: this kernel has no netem) for half
# the round trip. RTTS in ms; the results go to results/bench-net.md (docs/bench/net.md).
RTTS ?= 0.2,1
NETDELAY := target/netdelay/release/netdelay
# The soak's interpreter: another worktree's build with NET_PYTHON=/path/to/it/.venv/bin/python
NET_PYTHON ?= $(BIN)/python

net-tools: ## iproute2 and iptables from Debian's packages, when missing
	@command -v ip >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq iproute2 >/dev/null)
	@command -v iptables >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq iptables >/dev/null)

$(NETDELAY): benches/netdelay/src/main.rs benches/netdelay/Cargo.toml benches/netdelay/Cargo.lock
	cargo build -q --release --locked --manifest-path benches/netdelay/Cargo.toml --target-dir target/netdelay

bench-net: memcached venv develop-release net-tools $(NETDELAY) ## fastmc vs peers and raw floor through a simulated network
	$(BIN)/python benches/bench_net.py --rtts $(RTTS)

bench-net-soak: memcached net-tools $(NETDELAY) $(if $(filter $(BIN)/python,$(NET_PYTHON)),venv develop-release) ## SOAK_SECONDS under 1% loss and reordering
	$(NET_PYTHON) benches/bench_net.py --soak --soak-seconds $(SOAK_SECONDS)

# The soak test (8 threads, SOAK_SECONDS of mixed operations while servers are killed and
# restarted); marked `soak`, so it is not part of `make test`.
SOAK_SECONDS ?= 60
soak: memcached venv develop-release ## SOAK_SECONDS of mixed load while servers die
	SOAK_SECONDS=$(SOAK_SECONDS) $(BIN)/python -m pytest -q -s -m soak tests/faults/test_soak.py

# The seeded differential run against pylibmc, long: RANDOM_DIFF_OPS random operations from a
# fresh seed (printed on a failure; set RANDOM_DIFF_SEED to replay one), on one text server; half
# as many on three and a tenth in binary mode. make test runs 10,000.
RANDOM_DIFF_OPS ?= 100000
RANDOM_DIFF_SEED ?= $(shell date +%s)
random-diff: memcached venv develop ## a long seeded random differential run against pylibmc
	RANDOM_DIFF_OPS=$(RANDOM_DIFF_OPS) RANDOM_DIFF_SEED=$(RANDOM_DIFF_SEED) \
		$(BIN)/python -m pytest -q tests/api/test_random_diff.py

# Fuzz the reply parser for FUZZ_SECONDS (not part of `make test`). cargo fuzz wants nightly;
# RUSTC_BOOTSTRAP=1 lets the stable toolchain accept its flags.
FUZZ_SECONDS ?= 60
fuzz: ## fuzz the reply parsers for FUZZ_SECONDS
	@command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --locked
	cd fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz run parse_reply -- -max_total_time=$(FUZZ_SECONDS) -max_len=20000

# The release files (not part of `make test`: 30 release builds, the time is in
# docs/packaging.md): wheels for CPython 3.9-3.15 (3.14 and 3.15 run from release/sid.py's root
# where this machine lacks them), manylinux2014 and musllinux_1_2, x86_64 and
# aarch64, and macOS x86_64 and arm64, cross-built with zig, each checked (auditwheel or the
# Mach-O, contents, and an install and smoke test in a fresh venv of every CPython this machine
# can run them on, plus Debian's arm64 CPython under qemu-user for the aarch64 wheels; the macOS
# ones cannot run here), and the sdist built, checked and installed from source.
# Debian's musl, when it can be installed, lets the checks run musl's loader on the x86_64 musl
# wheels. docs/packaging.md says what was built and verified, and what could not be.
WHEEL_TARGETS ?= x86_64-unknown-linux-gnu x86_64-unknown-linux-musl aarch64-unknown-linux-gnu \
	aarch64-unknown-linux-musl x86_64-apple-darwin aarch64-apple-darwin

# The whole suite on CPython 3.14 and 3.15 against memcached 1.6.45, all three from Debian's
# unstable suite (release/sid.py: a debootstrap root in target/sid, made once; needs root): a
# debug wheel of the tree for each, built here with zig, installed into a venv there by pip with
# no compiler and no index, then pytest there. Not part of `make test` (several minutes each:
# docs/packaging.md has the times and counts).
test-sid: $(BIN)/.release-tools ## the whole suite on Debian's CPython 3.14 and 3.15, memcached 1.6.45 (slow)
	$(BIN)/python release/sid.py test 3.14 3.15

test-py314: $(BIN)/.release-tools ## the whole suite on Debian's CPython 3.14, memcached 1.6.45 (slow)
	$(BIN)/python release/sid.py test 3.14

test-py315: $(BIN)/.release-tools ## the whole suite on Debian's CPython 3.15, memcached 1.6.45 (slow)
	$(BIN)/python release/sid.py test 3.15

# The same on Debian unstable's PyPy 8 (Python 3.11), less the tests release/sid.py names as
# PyPy's gaps (docs/packaging.md): where pylibmc under PyPy is not the oracle, or PyPy differs.
test-pypy: $(BIN)/.release-tools ## the suite on Debian's PyPy 8, less its named gaps (slow)
	$(BIN)/python release/sid.py test pypy3

# The single and multi rows on PyPy 8, fastmc against pymemcache and the other peers that run
# there (release/pypy_bench.py; pylibmc does not run on PyPy), into results-pypy/.
bench-pypy: memcached $(BIN)/.release-tools ## the benchmark's single and multi rows on Debian's PyPy 8
	$(BIN)/python release/pypy_bench.py --out results-pypy

$(BIN)/.release-tools: release/requirements.txt $(BIN)/.installed
	$(BIN)/pip install -q --no-cache-dir -r release/requirements.txt
	touch $@

wheels: memcached $(BIN)/.release-tools ## build and check the release wheels and sdist in dist/ (slow)
	@[ "$$(uname -m)" != x86_64 ] || [ -x /lib/ld-musl-x86_64.so.1 ] || \
		(apt-get update -qq && apt-get install -y -qq musl >/dev/null) || \
		echo "Debian's musl is not installed: the musl wheels get the static checks only"
	$(BIN)/python release/wheels.py --out dist --targets $(WHEEL_TARGETS)

clean: ## remove build outputs, the venv, results and dist
	rm -rf target $(VENV) results dist
