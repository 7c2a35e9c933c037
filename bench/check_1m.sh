#!/usr/bin/env bash
# `robotsgate check --summary` over 1,000,000 URLs aimed at large_robots.txt, against the
# same work done with texting_robots (examples/baseline_check.rs), in one run.
# Prints both wall times (best of 3), both summaries (they must agree) and the ratio.
set -euo pipefail
cd "$(dirname "$0")/.."
count=${1:-1000000}
agent=${2:-ExampleBot}
cargo build --release --quiet --bin robotsgate --example baseline_check
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
robots=tests/data/large_robots.txt
target/release/examples/baseline_check --generate "$robots" "$count" > "$work/urls.txt"

best_ms() { # best wall time in ms of 3 runs of "$@"; last run's stdout in $work/out
  local best=""
  for _ in 1 2 3; do
    local start end ms
    start=$(date +%s%N)
    "$@" > "$work/out"
    end=$(date +%s%N)
    ms=$(( (end - start) / 1000000 ))
    if [ -z "$best" ] || [ "$ms" -lt "$best" ]; then best=$ms; fi
  done
  echo "$best"
}

ours_ms=$(best_ms target/release/robotsgate check --robots "$robots" --agent "$agent" --urls "$work/urls.txt" --summary)
ours_out=$(cat "$work/out")
base_ms=$(best_ms target/release/examples/baseline_check "$robots" "$agent" "$work/urls.txt")
base_out=$(cat "$work/out")

printf '%-16s %10s  %s\n' "" "wall ms" "summary"
printf '%-16s %10s  %s\n' robotsgate "$ours_ms" "$ours_out"
printf '%-16s %10s  %s\n' texting_robots "$base_ms" "$base_out"
python3 -c "print(f'robotsgate takes {$ours_ms/$base_ms:.3f} of the baseline time ({$base_ms/max($ours_ms,1):.1f}x faster) for $count URLs')"
if [ "$ours_out" != "$base_out" ]; then
  echo "verdict counts differ" >&2
  exit 1
fi
