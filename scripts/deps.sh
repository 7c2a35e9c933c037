#!/usr/bin/env bash
# Installs what a fresh Debian/Ubuntu machine lacks to build, run and test robotsgate.
# Idempotent: installs nothing when everything is present.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v cc >/dev/null || need+=(build-essential)
command -v cmake >/dev/null || need+=(cmake)          # pingora-core builds zlib-ng
command -v curl >/dev/null || need+=(curl)            # tests drive the proxy with curl -x
command -v openssl >/dev/null || need+=(openssl)      # bench/https_bench.py signs nginx's cert
command -v systemd-analyze >/dev/null || need+=(systemd)  # tests judge systemd/robotsgate.service
command -v chromium >/dev/null || need+=(chromium)    # the status page is tested in a browser
command -v redis-server >/dev/null || need+=(redis-server)  # fleet mode: tests start their own servers and a Cluster
command -v redis-cli >/dev/null || need+=(redis-tools)
command -v haproxy >/dev/null || [ -x /usr/sbin/haproxy ] || need+=(haproxy)  # the fleet's routing front
command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || need+=(nginx-light)  # an HTTP/2 origin for the upstream h2 tests
# Transparent mode: tests redirect a crawler uid's ports 80/443 in a network namespace.
command -v ip >/dev/null || need+=(iproute2)
command -v iptables >/dev/null || need+=(iptables)
command -v nft >/dev/null || need+=(nftables)
command -v setpriv >/dev/null || need+=(util-linux)
# The package (scripts/package.sh) is judged by lintian and listed with dpkg-deb.
command -v lintian >/dev/null || need+=(lintian)
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
command -v python3 >/dev/null && [ -x /usr/bin/python3 ] || need+=(python3)
if ((${#need[@]})); then apt_install "${need[@]}"; fi
# The transparent tests run the scripts under tests/helpers/crawler/ with Debian's
# /usr/bin/python3 as an unprivileged uid: every module they import, as Debian's
# package (check_python.py reads the modules from the scripts and names the packages).
mapfile -t crawler < <(/usr/bin/python3 tests/helpers/check_python.py --crawler --packages)
if ((${#crawler[@]})); then apt_install "${crawler[@]}"; fi
# The tests' Python (tests/helpers/*.py and the inline scripts) runs on the `python3`
# first on PATH, which need not be Debian's (a pyenv or a venv): its packages
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
/usr/bin/python3 tests/helpers/check_python.py --crawler
if ! command -v cargo >/dev/null; then
  echo "cargo not found: install a Rust toolchain (rustup) first" >&2
  exit 1
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
