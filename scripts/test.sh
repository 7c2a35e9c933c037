#!/usr/bin/env bash
# The whole test suite, as CI runs it: install missing packages, check formatting and
# lints, then every test (unit, conformance, property, integration over real sockets).
set -euo pipefail
cd "$(dirname "$0")/.."
# Needs root (or sudo): the tests create network namespaces and redirect a crawler uid's
# traffic in them.
scripts/deps.sh
if ! cargo fmt --version >/dev/null 2>&1; then
  rustup component add rustfmt || {
    echo "rustfmt is not installed and rustup could not add it (rustup component add rustfmt)" >&2
    exit 1
  }
fi
cargo fmt --all --check
# Lints are part of the suite, never skipped: a toolchain without clippy gets it from
# rustup, or the run stops here saying so.
if ! cargo clippy --version >/dev/null 2>&1; then
  rustup component add clippy || {
    echo "clippy is not installed and rustup could not add it (rustup component add clippy)" >&2
    exit 1
  }
fi
# The release profile throughout: clippy, `cargo doc` and the fuzz check share one
# checked build of the dependencies, and the tests reuse its build scripts and macros.
cargo clippy --release --all-targets --locked -- -D warnings
# Every Python module the tests import, for the interpreters they run (names the
# interpreter and the module when one is missing).
python3 tests/helpers/check_python.py
/usr/bin/python3 tests/helpers/check_python.py --crawler
# A failing test's message is printed again last, without a backtrace: CI keeps the
# tail of the output, and a backtrace there would hide which assertion failed.
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! RUST_BACKTRACE=0 cargo test --release --locked 2>&1 | tee "$log"; then
  echo "== where each failing test stopped =="
  grep -A6 "panicked at" "$log" | cut -c1-400
  exit 1
fi
# The contributors' documentation builds without a warning (a broken link fails).
RUSTDOCFLAGS="-D warnings" cargo doc --release --no-deps --document-private-items --locked --quiet
# The fuzz targets still build against today's API (they run by hand: docs/testing.md),
# checked in this crate's target directory, so with the dependencies checked above.
CARGO_TARGET_DIR="$PWD/target" cargo check --release --manifest-path fuzz/Cargo.toml --locked --quiet
