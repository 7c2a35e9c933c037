#!/usr/bin/env bash
# Builds the Debian package, target/debian/robotsgate_<version>_amd64.deb, with cargo-deb
# (installed when missing): the binary, the systemd unit, /etc/robotsgate/robotsgate.yaml
# (from conf/production.yaml), the dashboard and alert rules in /usr/share/robotsgate.
# What goes in: [package.metadata.deb] in Cargo.toml, maintainer scripts in debian/.
#
#   scripts/package.sh              # the shipped build (profile dist: LTO), then the package
#   scripts/package.sh --profile release --no-build   # package the release binary already built
#   sudo apt install ./target/debian/robotsgate_*_amd64.deb
set -euo pipefail
cd "$(dirname "$0")/.."
# Cargo.toml's `dist` profile unless the caller names another.
profile=(--profile dist)
for arg in "$@"; do
  if [[ "$arg" == --profile* ]]; then
    profile=()
  fi
done
if ! cargo deb --version >/dev/null 2>&1; then
  echo "installing: cargo-deb" >&2
  cargo install --locked --quiet cargo-deb --version '^3'
fi
# Stripped: the release profile keeps line tables for backtraces in development.
cargo deb --locked --strip "${profile[@]}" "$@"
