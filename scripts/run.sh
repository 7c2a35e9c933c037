#!/usr/bin/env bash
# Builds robotsgate and runs it with the shipped configuration (conf/robotsgate.yaml):
# proxy on 127.0.0.1:8080 (HTTP and HTTPS via CONNECT), admin/metrics on 127.0.0.1:9090.
# On first run it creates the operator CA in var/ (see docs/https.md). Extra arguments
# go to `run`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh --build
cargo build --release --locked --bin robotsgate
if [ ! -f var/ca.pem ]; then
  mkdir -p var
  target/release/robotsgate ca init --cert var/ca.pem --key var/ca.key
  echo "crawlers must trust var/ca.pem for HTTPS (curl --cacert var/ca.pem, REQUESTS_CA_BUNDLE, update-ca-certificates)" >&2
fi
exec target/release/robotsgate run --config conf/robotsgate.yaml "$@"
