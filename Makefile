# Veil's two user-facing commands are `make demo` and `make test`; both create
# .venv and install what they need on first use: `make demo` what the demo and the
# README's examples use, `make test` (and setup, lint, fuzz, bench) everything.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.veil-installed
DEMO_STAMP := $(VENV)/.veil-installed-demo
RUST_SOURCES := $(shell find rust -name '*.rs' -o -name Cargo.toml) Cargo.toml pyproject.toml
# rustup's directory, where the bootstrap installs Rust for a user who has none
export PATH := $(HOME)/.cargo/bin:$(PATH)

.PHONY: demo test bench results lint setup clean pgext fuzz

setup: $(STAMP)

$(STAMP): $(RUST_SOURCES)
	@bash scripts/bootstrap.sh all
	@touch $(STAMP) $(DEMO_STAMP)

# A full install serves the demo too: only without a current one does the demo install its part.
$(DEMO_STAMP): $(RUST_SOURCES)
	@if [ -f $(STAMP) ] && [ -z "$$(find $(RUST_SOURCES) -newer $(STAMP))" ]; then :; \
	else bash scripts/bootstrap.sh demo; fi
	@touch $(DEMO_STAMP)

demo: $(DEMO_STAMP)
	$(VENV)/bin/veil demo

# Rust kernel tests first, so that the run closes on pytest's summary line.
# FerretDB (the documents tests' server) is built here, where its progress shows, not under pytest.
# Toxiproxy (tests/tooling's --link test, near the end) builds beside pytest, off its critical
# path (61 s of setup in CI): that test waits on the build's lock if need be, and without Go
# skips as before; a failed build here is retried there, where it fails loudly.
test: $(STAMP)
	cargo test --release -p veil-kernels -p veil-wire -q
	$(PY) -c 'from veil_dev.servers.ferretdb import build; build()'
	$(PY) -c 'from veil_dev.servers.toxiproxy import build; build()' >/dev/null 2>&1 & \
	$(PY) -m pytest -q -p no:cacheprovider --durations=30 tests; status=$$?; wait; exit $$status

# Differential SQL fuzzer: N generated queries from SEED through Veil and plaintext
# DuckDB; failures are shrunk into tests/fuzz/regressions. FUZZ_ARGS passes options,
# e.g. FUZZ_ARGS="--backend postgres --hom always", "--backend spark" or "--mode dml".
# The documents fuzzer: python -m tests.docfuzz SEED N (docs/documents.md, Tests).
SEED ?= 0
N ?= 1000
fuzz: $(STAMP)
	$(PY) -m tests.fuzz $(SEED) $(N) $(FUZZ_ARGS)

bench: $(STAMP)
	$(VENV)/bin/veil bench crypto --json bench/crypto/crypto.json --png bench/crypto/crypto.png

# bench/RESULTS.md from bench/<area>/meta.toml and the latest JSON beside it.
results:
	$(PY) tools/bench_results.py

lint: $(STAMP)
	$(VENV)/bin/ruff check python tests tools
	$(VENV)/bin/ruff format --check python tests tools
	$(VENV)/bin/mypy
	$(VENV)/bin/mypy tools
	cargo fmt --all -- --check
	cargo clippy --release --workspace -q -- -D warnings

# Build and install Veil's PostgreSQL 15 extension (and PostgreSQL itself if absent).
pgext:
	bash scripts/postgres/install_extension.sh

clean:
	rm -rf $(VENV) target
