#!/usr/bin/env python3
"""Instructions per request of this build against another, counted by callgrind: where a
difference in CPU time comes from, on a host without hardware counters.

CPU time per request (bench/proxy_bench.py) moves 10-20% between runs on this host, more
than most changes it is asked to judge. An instruction count under callgrind is the same
from run to run within a few hundred instructions, and callgrind says which function
each instruction ran in. Each build serves the same nginx origin through one keep-alive
connection at a time (or `--close`: one request per connection), access log on, pacing
off; counting starts after 400 unmeasured requests, so the robots.txt is cached and the
pools are warm.

Printed: instructions per request of each build and their ratio, then the functions whose
own instructions (inlined code included, callees not) changed most. `memcpy` counts one
instruction per octet of its `rep movsb` copies: large and cheap (Pingora boxes each
request's future, several KiB, once or twice), so the ratio is given without it too.

`--cache` adds callgrind's cache and branch simulation (slower): first-level and
last-level misses and mispredicted branches per request, for where instructions alone
do not explain a difference in time.

`--profile dist` counts this build as it ships (Cargo.toml's `dist` profile: link-time
optimisation, one code unit; built first) instead of the release profile the tests run.

`--evidence` counts this build with every decision recorded (`evidence.dir`) against
the same build without: what recording costs in user-space instructions (the system
calls it makes are not counted: bench/proxy_bench.py --evidence measures CPU time).

Usage: bench/instructions.py (--compare OTHER_ROBOTSGATE_BINARY | --evidence) [--requests 2000] [--close]
                             [--top 30] [--cache] [--profile dist]
Needs valgrind and nginx (installs them if missing). Only processes this script started
are stopped, by PID.
"""

import argparse
import glob
import http.client
import os
import re
import shutil
import subprocess
import sys

from benchlib import (POOL, UNPACED, prepare, robotsgate_binary, free_port, page_origin, robotsgate_config,
                      stop, wait_port)


def load(port, origin, count, close):
    """`count` GETs through the proxy on `port`, one at a time; each must be a 200."""
    conn = None
    for _ in range(count):
        if conn is None:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        headers = {"Host": origin, **({"Connection": "close"} if close else {})}
        conn.request("GET", f"http://{origin}/index.html", headers=headers)
        answer = conn.getresponse()
        answer.read()
        if answer.status != 200:
            sys.exit(f"the proxy answered {answer.status}")
        if close:
            conn.close()
            conn = None
    if conn is not None:
        conn.close()


def self_costs(dump):
    """Function -> own instructions, from a callgrind dump (inlined code summed by name)."""
    text = subprocess.run(["callgrind_annotate", "--threshold=100", "--auto=no", dump],
                          capture_output=True, text=True, check=True).stdout
    costs = {}
    for line in text.splitlines():
        m = re.match(r"\s*([\d,]+) \(\s*([\d.]+)%\)\s+(.*?)(?: \[.*\])?$", line)
        # Threads' outer frames are listed with their callees' cost: left out.
        if not m or "PROGRAM TOTALS" in m.group(3) or float(m.group(2)) > 50:
            continue
        name = re.sub(r"::h[0-9a-f]{16}$", "", m.group(3).split(":", 1)[-1])
        costs[name] = costs.get(name, 0) + int(m.group(1).replace(",", ""))
    return costs


def simulated(dump):
    """Event -> count of the whole dump (`--cache`: cache and branch simulation)."""
    text = subprocess.run(["callgrind_annotate", "--threshold=100", "--auto=no", dump],
                          capture_output=True, text=True, check=True).stdout
    events = re.search(r"^Events shown:\s+(.*)$", text, re.M).group(1).split()
    totals = re.search(r"^(.*)PROGRAM TOTALS", text, re.M).group(1)
    counts = [int(n.replace(",", "")) for n in re.findall(r"([\d,]+)(?: \([^)]*\))?", totals)]
    return dict(zip(events, counts))


def measure(binary, conf, origin, work, name, args):
    """Self costs per request of `binary` serving `args.requests` requests (and, with
    `--cache`, the simulated cache and branch events per request under "events")."""
    port = free_port()
    out = f"{work}/{name}.callgrind"
    simulate = ["--cache-sim=yes", "--branch-sim=yes"] if args.cache else []
    proc = subprocess.Popen(
        ["valgrind", "--tool=callgrind", *simulate, f"--callgrind-out-file={out}", binary, "run", "--config", conf,
         "--listen", f"127.0.0.1:{port}", "--allow-destination", "127.0.0.0/8", "--agent", "ExampleBot"],
        env={**os.environ, "RUST_LOG": "info"}, stdout=subprocess.DEVNULL,
        stderr=open(f"{work}/{name}.log", "w"))
    try:
        wait_port(port, 120)
        load(port, origin, 400, args.close)
        subprocess.run(["callgrind_control", "-z", str(proc.pid)], check=True, capture_output=True)
        load(port, origin, args.requests, args.close)
        subprocess.run(["callgrind_control", "-d", "measured", str(proc.pid)], check=True, capture_output=True)
    finally:
        stop([proc])
    dumps = [d for d in glob.glob(out + "*") if "Trigger: dump measured" in open(d, errors="replace").read(4096)]
    if len(dumps) != 1:
        sys.exit(f"expected one measured dump of {name}, found {dumps}")
    costs = {k: v / args.requests for k, v in self_costs(dumps[0]).items()}
    if args.cache:
        costs["events"] = {k: v / args.requests for k, v in simulated(dumps[0]).items()}
    return costs


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--compare", help="the other robotsgate binary")
    parser.add_argument("--evidence", action="store_true",
                        help="this build recording evidence against this build without")
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--close", action="store_true", help="one request per connection")
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--cache", action="store_true",
                        help="also simulate caches and branches: misses and mispredictions per request")
    parser.add_argument("--profile", default="release",
                        help="the Cargo profile of this build's robotsgate (dist: as it ships)")
    args = parser.parse_args()
    if bool(args.compare) == args.evidence:
        parser.error("give --compare OTHER_ROBOTSGATE_BINARY or --evidence")
    work = prepare("instructions", {"valgrind": "valgrind", "nginx": "nginx-light"})
    ours = robotsgate_binary(args.profile)
    started = []
    try:
        origin = page_origin(work, started)
        conf = robotsgate_config(work, "rg", "  admin_listen: null\n" + UNPACED, POOL)
        if args.evidence:
            recording = robotsgate_config(work, "rg-evidence", "  admin_listen: null\n" + UNPACED +
                                          f"  evidence:\n    dir: {work}/evidence\n", POOL)
            this = measure(ours, recording, origin, work, "this", args)
            other = measure(ours, conf, origin, work, "other", args)
        else:
            this = measure(ours, conf, origin, work, "this", args)
            other = measure(args.compare, conf, origin, work, "other", args)
    finally:
        stop(started)
        shutil.rmtree(work, ignore_errors=True)

    events = (this.pop("events", None), other.pop("events", None))
    total = lambda costs, memcpy=True: sum(v for k, v in costs.items() if memcpy or "memcpy" not in k)
    mode = "one request per connection" if args.close else "keep-alive"
    print(f"\ninstructions per request ({mode}, {args.requests} requests, access log on):")
    print(f"  this build  {total(this):9.0f}   without memcpy {total(this, False):9.0f}")
    print(f"  other       {total(other):9.0f}   without memcpy {total(other, False):9.0f}")
    print(f"  ratio       {total(this) / total(other):9.3f}x  without memcpy "
          f"{total(this, False) / total(other, False):9.3f}x")
    if events[0] and events[1]:
        print("\nsimulated per request (callgrind's cache and branch models), this build, other, ratio:")
        for event in events[0]:
            print(f"  {event:<6} {events[0][event]:10.0f} {events[1].get(event, 0):10.0f} "
                  f"{events[0][event] / max(events[1].get(event, 0), 1e-9):7.3f}x")
    print("\nfunctions whose own instructions per request changed most (this - other, other, this):")
    names = sorted(set(this) | set(other), key=lambda k: -abs(this.get(k, 0) - other.get(k, 0)))
    for name in names[:args.top]:
        print(f"  {this.get(name, 0) - other.get(name, 0):+7.0f} {other.get(name, 0):7.0f} "
              f"{this.get(name, 0):7.0f}  {name[:130]}")


if __name__ == "__main__":
    main()
