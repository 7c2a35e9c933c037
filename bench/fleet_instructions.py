#!/usr/bin/env python3
"""What a hand-over costs in instructions, counted by callgrind: the relaying member's and
the owner's for a request handed over, against the owner's for a local request.

The fleet's CPU ratio (bench/fleet_bench.py) moves by 10-20% between runs on this host and
includes the kernel's part; callgrind counts user-space instructions, the same from run to
run within a few hundred, and says where they go. Two members A and B of one fleet (a
redis-server, mutual TLS on the peer channel, `max_in_flight: 0`, access log off as in
fleet_bench) and nginx serving 16 origins, all of them A's (met through A first). Three
runs, each with a fresh fleet and one member under callgrind: B relaying requests to A
(handed, B counted), the same with A counted, and requests sent to A itself (local, A
counted). Each run sends 300 unmeasured requests (robots.txt cached, B's pool warm), then
`--requests` measured ones, one at a time on one keep-alive connection, rotating over the
origins.

Printed: instructions per request of each, with and without `memcpy` (callgrind counts
its `rep movsb` once per octet copied), and (relaying + owner) / local, the hand-over's
ratio in user space.

With --profile dist, the members run as the build ships (Cargo.toml's `dist` profile,
built first) instead of the release profile the tests run.

Usage: bench/fleet_instructions.py [--requests 1000] [--profile dist]
Needs valgrind, nginx and redis-server (installs them if missing). Only processes this
script started are stopped, by PID.
"""

import argparse
import glob
import http.client
import os
import shutil
import subprocess
import sys
import time

from benchlib import prepare, fleet_member, start_redis, stop, robotsgate_binary
from fleet_bench import start_origins
from instructions import self_costs


def load(port, origins, count):
    """`count` GETs through the member on `port`, one at a time on one connection, rotating
    over `origins`; each must be a 200."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    for i in range(count):
        origin = f"127.0.0.1:{origins[i % len(origins)]}"
        conn.request("GET", f"http://{origin}/index.html", headers={"Host": origin})
        answer = conn.getresponse()
        answer.read()
        if answer.status != 200:
            sys.exit(f"member answered {answer.status}")
    conn.close()


def measure(work, binary, origins, counted, through, requests):
    """Instructions per request of member `counted` ("a" or "b", both run from `binary`)
    while `requests` go through member `through`, in a fresh fleet: (all, memcpy's)."""
    started = []
    try:
        redis_port = start_redis(work, started)
        callgrind = ("valgrind", "--tool=callgrind", f"--callgrind-out-file={work}/{counted}.callgrind")
        members = {name: fleet_member(work, name, redis_port, started, callgrind if name == counted else (), binary)
                   for name in ("a", "b")}
        time.sleep(1.5)  # both registered, each knowing the other
        load(members["a"][1], origins, len(origins))  # A meets every origin first: it owns them all
        load(members[through][1], origins, 300)
        pid = members[counted][0].pid
        subprocess.run(["callgrind_control", "-z", str(pid)], check=True, capture_output=True)
        load(members[through][1], origins, requests)
        subprocess.run(["callgrind_control", "-d", "measured", str(pid)], check=True, capture_output=True)
    finally:
        stop(started)
    dumps = [d for d in glob.glob(f"{work}/{counted}.callgrind*")
             if "Trigger: dump measured" in open(d, errors="replace").read(4096)]
    if len(dumps) != 1:
        sys.exit(f"expected one measured dump of member {counted}, found {dumps}")
    costs = self_costs(dumps[0])
    for dump in glob.glob(f"{work}/{counted}.callgrind*"):
        os.remove(dump)
    memcpy = sum(v for k, v in costs.items() if "memcpy" in k)
    return sum(costs.values()) / requests, memcpy / requests


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--profile", default="release",
                        help="the Cargo profile of the members (dist: as it ships)")
    args = parser.parse_args()
    work = prepare("fleet-instructions", {"valgrind": "valgrind", "nginx": "nginx-light", "redis-server": "redis-server"})
    binary = robotsgate_binary(args.profile)
    started = []
    try:
        origins = start_origins(work, started)
        runs = {
            "relaying member, handed": measure(work, binary, origins, "b", "b", args.requests),
            "owner, handed": measure(work, binary, origins, "a", "b", args.requests),
            "owner, local": measure(work, binary, origins, "a", "a", args.requests),
        }
    finally:
        stop(started)
        shutil.rmtree(work, ignore_errors=True)
    print(f"\ninstructions per request ({args.requests} requests, one at a time, user space):")
    for name, (total, memcpy) in runs.items():
        print(f"  {name:<26} {total:9.0f}   without memcpy {total - memcpy:9.0f}")
    (relay, relay_copy), (owner, owner_copy), (local, local_copy) = runs.values()
    print(f"  {'handed / local':<26} {(relay + owner) / local:9.3f}x  without memcpy "
          f"{(relay - relay_copy + owner - owner_copy) / (local - local_copy):9.3f}x")


if __name__ == "__main__":
    main()
