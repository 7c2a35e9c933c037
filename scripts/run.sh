#!/usr/bin/env bash
# Builds robotsgate and runs it with the shipped configuration (conf/robotsgate.yaml):
# proxy on 127.0.0.1:8080, admin/metrics on 127.0.0.1:9090. Extra arguments go to `run`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
exec cargo run --release --locked --bin robotsgate -- run --config conf/robotsgate.yaml "$@"
