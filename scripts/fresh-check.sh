#!/usr/bin/env bash
# Plays a new machine: removes what scripts/deps.sh installs, then runs the README's
# test command on a clean clone of HEAD with a fresh venv's python3 first on PATH. A
# green run on a machine that ran deps.sh before can hide a missing install step; this
# one cannot. It removes Debian packages system-wide: run it on a throwaway machine or
# VM, never on one you care about.
#
#   scripts/fresh-check.sh --remove-packages
#
# Kept: the packages the machine itself stands on (the compiler, curl, openssl,
# systemd, iproute2, util-linux and Debian's python3), which a new machine has.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" != "--remove-packages" ]; then
  sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
fi
sudo=""
[ "$(id -u)" = 0 ] || sudo="sudo"
keep=" build-essential curl openssl systemd iproute2 util-linux python3 "
remove=()
for package in $(scripts/deps.sh --packages); do
  [[ "$keep" == *" $package "* ]] || remove+=("$package")
done
echo "removing: ${remove[*]}" >&2
DEBIAN_FRONTEND=noninteractive $sudo apt-get remove -y -qq --purge "${remove[@]}" || true
DEBIAN_FRONTEND=noninteractive $sudo apt-get autoremove -y -qq --purge || true
rm -rf target/test-tools

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
git clone -q . "$work/robotsgate"
python3 -m venv "$work/venv"
echo "a clean clone of $(git rev-parse --short HEAD) in $work, python3: $work/venv/bin/python3" >&2
cd "$work/robotsgate"
PATH="$work/venv/bin:$PATH" scripts/test.sh
