#!/usr/bin/env bash
# Installs what a fresh Debian/Ubuntu machine lacks to build, run and test robotsgate.
# Idempotent: installs nothing when everything is present.
set -euo pipefail

need=()
command -v cc >/dev/null || need+=(build-essential)
command -v cmake >/dev/null || need+=(cmake)          # pingora-core builds zlib-ng
command -v curl >/dev/null || need+=(curl)            # tests drive the proxy with curl -x
command -v python3 >/dev/null || need+=(python3)
if ((${#need[@]})); then
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  echo "installing: ${need[*]}" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}"
fi
if ! command -v cargo >/dev/null; then
  echo "cargo not found: install a Rust toolchain (rustup) first" >&2
  exit 1
fi
