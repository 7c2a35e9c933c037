#!/usr/bin/env bash
# Installs what a fresh Debian/Ubuntu machine lacks to build, run and test robotsgate.
# Idempotent: installs nothing when everything is present.
#
#   scripts/deps.sh             install what is missing
#   scripts/deps.sh --build     only what building needs (a C toolchain, cmake), and check
#                               the Rust toolchain (scripts/run.sh)
#   scripts/deps.sh --packages  print every Debian package it may install, one a line
#                               (scripts/fresh-check.sh removes them to play a new machine)
set -euo pipefail
cd "$(dirname "$0")/.."

# A command, and the Debian package that provides it: installed when the command is
# missing (checked on PATH, then in /usr/sbin).
TOOLS=(
  "cc build-essential"            # the toolchain's linker; crates that build C
  "cmake cmake"                   # pingora-core builds zlib-ng
  "curl curl"                     # tests drive the proxy with curl -x
  "openssl openssl"               # bench/https_bench.py signs nginx's cert
  "systemd-analyze systemd"       # tests judge systemd/robotsgate.service
  "chromium chromium"             # the status page and h2 crawling, in a browser
  "redis-server redis-server"     # fleet mode: tests start their own servers and a Cluster
  "redis-cli redis-tools"
  "haproxy haproxy"               # the fleet's routing front
  "nginx nginx-light"             # an HTTP/2 origin for the upstream h2 tests
  "ip iproute2"                   # transparent mode: a crawler uid's ports 80/443
  "iptables iptables"             #   redirected in a network namespace
  "nft nftables"
  "setpriv util-linux"
  "lintian lintian"               # scripts/package.sh's package is judged by lintian
  "python3 python3"               # Debian's /usr/bin/python3, the crawler uid's
)

# A module Debian's /usr/bin/python3 imports in the tests (the crawler scripts under
# tests/helpers/crawler/, run as an unprivileged uid in a network namespace, and any
# helper run there), and its Debian package: installed when the import fails.
# tests/helpers/check_python.py --crawler checks this list covers every import.
DEBIAN_PYTHON=(
  "requests python3-requests"
  "h2 python3-h2"
  "cryptography python3-cryptography"
  "feedparser python3-feedparser"     # tests/helpers/feed_reader.py
)

# What building alone needs (the first two TOOLS).
if [ "${1:-}" = "--build" ]; then
  TOOLS=("${TOOLS[@]:0:2}")
fi

# The Rust toolchain: Cargo.toml's rust-version (1.85; the lockfile is version 4).
rust_check() {
  if ! command -v cargo >/dev/null; then
    echo "cargo not found: install a Rust toolchain, 1.85 or later (https://rustup.rs)" >&2
    exit 1
  fi
  local have
  have="$(cargo --version | awk '{print $2}')"
  if ! printf '1.85.0\n%s\n' "${have%%-*}" | sort -V -C; then
    echo "cargo $have is older than 1.85, which robotsgate needs: rustup update stable" >&2
    exit 1
  fi
}

if [ "${1:-}" = "--packages" ]; then
  for tool in "${TOOLS[@]}" "${DEBIAN_PYTHON[@]}"; do echo "${tool#* }"; done
  echo python3-pip
  exit 0
fi

need=()
for tool in "${TOOLS[@]}"; do
  command -v "${tool%% *}" >/dev/null || [ -x "/usr/sbin/${tool%% *}" ] || need+=("${tool#* }")
done
[ -x /usr/bin/python3 ] || need+=(python3)

# Debian's package lists, refreshed once a run and only when something is missing.
sudo=""
[ "$(id -u)" = 0 ] || sudo="sudo"
updated=""
apt_update() { [ -n "$updated" ] || { $sudo apt-get update -qq; updated=1; }; }
apt_install() {
  echo "installing: $*" >&2
  apt_update
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "$@"
}
if ((${#need[@]})); then apt_install "${need[@]}"; fi
rust_check
if [ "${1:-}" = "--build" ]; then
  exit 0
fi

# Debian's /usr/bin/python3: every module the tests import with it, as Debian's package.
python=()
for module in "${DEBIAN_PYTHON[@]}"; do
  /usr/bin/python3 -c "import ${module%% *}" 2>/dev/null || python+=("${module#* }")
done
if ((${#python[@]})); then apt_install "${python[@]}"; fi
/usr/bin/python3 tests/helpers/check_python.py --crawler

# The tests' own Python (tests/helpers/**/*.py and the inline scripts) runs on the
# `python3` first on PATH, which need not be Debian's (a pyenv or a venv): its packages
# (tests/helpers/requirements.txt) are installed for that interpreter.
if ! python3 tests/helpers/check_python.py 2>/dev/null; then
  echo "installing for $(command -v python3): tests/helpers/requirements.txt" >&2
  if ! python3 -m pip --version >/dev/null 2>&1; then
    python3 -m ensurepip --upgrade >/dev/null 2>&1 || apt_install python3-pip
  fi
  python3 -m pip install --quiet -r tests/helpers/requirements.txt 2>/dev/null \
    || python3 -m pip install --quiet --break-system-packages -r tests/helpers/requirements.txt
  python3 tests/helpers/check_python.py
fi

# scripts/package.sh builds the Debian package with cargo-deb.
if ! cargo deb --version >/dev/null 2>&1; then
  echo "installing: cargo-deb" >&2
  cargo install --locked --quiet cargo-deb --version '^3'
fi
# Debian's Prometheus (prometheus, promtool) for the alert-rule and dashboard tests,
# unpacked into target/test-tools/ rather than installed: installing the package would
# start a Prometheus service on this machine's :9090.
tools="target/test-tools/prometheus"
if ! command -v promtool >/dev/null && [ ! -x "$tools/usr/bin/promtool" ]; then
  echo "unpacking: Debian's prometheus into $tools" >&2
  download="$(mktemp -d)"
  if ! (cd "$download" && apt-get download -qq prometheus 2>/dev/null); then
    apt_update
    (cd "$download" && apt-get download -qq prometheus)
  fi
  mkdir -p "$tools"
  dpkg-deb -x "$download"/prometheus_*.deb "$tools"
  rm -rf "$download"
fi
