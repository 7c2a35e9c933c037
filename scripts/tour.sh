#!/usr/bin/env bash
# The README's five-minute tour as one script (the test suite runs it: tests/it/docs.rs).
# A local origin whose robots.txt disallows /private and asks for 1 s between requests;
# robotsgate in front of it with conf/robotsgate.yaml; curl and Python requests through
# it. Needs no network. Ports: TOUR_PROXY_PORT, TOUR_ADMIN_PORT, TOUR_ORIGIN_PORT.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${ROBOTSGATE_BIN:-target/release/robotsgate}
PROXY=127.0.0.1:${TOUR_PROXY_PORT:-18080}
ADMIN=127.0.0.1:${TOUR_ADMIN_PORT:-19090}
ORIGIN=127.0.0.1:${TOUR_ORIGIN_PORT:-18000}
work=$(mktemp -d)
origin="" proxy=""
trap 'kill $origin $proxy 2>/dev/null || true; rm -rf "$work"' EXIT
# Waits up to 10 s for a URL to answer.
ready() { for _ in $(seq 100); do curl -sf -o /dev/null "$1" && return 0; sleep 0.1; done; return 1; }

# 1. An origin: robots.txt, a page, a private page.
printf 'User-agent: *\nDisallow: /private\nCrawl-delay: 1\n' > "$work/robots.txt"
mkdir "$work/private" && echo hello > "$work/page" && echo secret > "$work/private/page"
python3 -m http.server "${ORIGIN#*:}" --bind 127.0.0.1 --directory "$work" >/dev/null 2>&1 &
origin=$!
ready "http://$ORIGIN/robots.txt"

# 2. robotsgate with the shipped configuration (its HTTPS CA in var/, as scripts/run.sh
#    makes it), loopback origins allowed for the tour.
[ -f var/ca.pem ] || { mkdir -p var && "$BIN" ca init --cert var/ca.pem --key var/ca.key; }
"$BIN" run --config conf/robotsgate.yaml --listen "$PROXY" --admin-listen "$ADMIN" \
  --allow-destination 127.0.0.0/8 2>"$work/robotsgate.log" &
proxy=$!
ready "http://$ADMIN/healthz"

# 3. A disallowed page: 403 and the rule that decided; the origin never sees it.
curl -s -i -x "http://$PROXY" "http://$ORIGIN/private/page" | tee "$work/403" | head -5
grep -q "^HTTP/1.1 403" "$work/403"

# 4. Pacing: three requests from a crawler, answered a Crawl-delay apart.
python3 - "$PROXY" "$ORIGIN" <<'PY'
import sys, time, requests
proxy, origin = sys.argv[1], sys.argv[2]
start = time.monotonic()
for n in range(3):
    answer = requests.get(f"http://{origin}/page", proxies={"http": f"http://{proxy}"})
    print(answer.status_code, f"{time.monotonic() - start:.1f} s")
    assert answer.status_code == 200
assert time.monotonic() - start >= 2.0, "three requests under Crawl-delay 1 take 2 s"
PY

# 5. Why was it blocked? The decision the proxy makes, with its rule and line.
curl -s "http://$ADMIN/check?url=http://$ORIGIN/private/page" | tee "$work/check"
grep -q '"disallowed"' "$work/check"

# 6. The status page and the metrics.
curl -sf "http://$ADMIN/" -o /dev/null && echo "status page: http://$ADMIN/"
curl -s "http://$ADMIN/metrics" | grep '^robotsgate_requests_total' | grep -v ' 0$'
