#!/usr/bin/env python3
"""Fleet mode's cost: a request its origin's owner serves itself (local) against one that
arrives at another member and is handed over to the owner, in one run.

Everything runs on 127.0.0.1: nginx serving 16 origins (one port each, robots.txt with
no Crawl-delay), a redis-server, and two fleet members A and B (`threads: 1`,
`max_in_flight: 0`: the cost of the path, not of waiting). Every origin is met first
through A, so A owns them all (`follow_traffic_seconds: 0`: they stay A's while B's
runs send them all their requests). wrk then sends GETs rotating over the 16 origins:

* local — through A, which paces and forwards them itself;
* handed — through B, which hands each to A over the peer channel (mutual TLS, pooled);
* handed by HAProxy — the named baseline for the handing member's part: HAProxy
  (Debian's, one thread, on B's CPUs) in B's place, relaying each request to A's peer
  channel over the same mutual TLS with a fixed `robotsgate-peer` context, connections
  reused. What a hand-over costs when the relay is as lean as a C proxy's: A's part
  is the same, only the relay differs;
* local again — the A/A control: the same load as `local`, to show the noise.

Three rounds, the order rotated each round. Per run: requests/s, p50/p99 latency, CPU µs
per request of both members (and HAProxy) together (utime+stime from /proc) and Redis commands per
request (INFO commandstats; the lease renewals included: the steady state makes no
other). Then the ratios to local (handed, handed by HAProxy, local again), median
[min-max] over the rounds, and the p50 each adds; each run's CPU split into user space
and the kernel, with the context switches per request (a thread that slept, one that was
preempted), and handed/local for each part; and handed / handed by HAProxy, the relay
against the named baseline round by round.

A is pinned to the first CPU; B, nginx, Redis and wrk share the others (a 2-core machine
cannot give each proxy a core of its own and the load one more). With --alone relay, the
relaying process (B, D, HAProxy) is the one alone, on the last CPU, and the owners share
the others with the load: the relay against HAProxy is then each relay's cost on a core
of its own, not how often the load's wake-ups on its core switch it out (at full load
our relay writes each answer as it reads it, and every write wakes wrk on the same core;
HAProxy writes a batch at once).

The goals this bench reads (issue #70; figures in docs/benchmarks.md): the relay at most
1.15x HAProxy's in its place ("handed/handed by HAProxy"), read with --alone relay, where
the two relays compared each have a core to themselves; and the hand-over's CPU at most
ab278f8's ("handed/other handed" with --compare that build), in either placement. The
third, instructions per hand-over at most 1.75x a local request's, is
bench/fleet_instructions.py's.

With --pause-ms N each connection waits N ms after each answer: the load is then set by
the clients, not by how fast a member answers, so local and handed runs meet members
equally busy (at full load the handed run is slower, a member waits more between
requests, and each wake-up costs it more per request; this mode shows how much of the
ratio that is).

With --compare BINARY, a second fleet of another build (C pinned as A, D relaying as B,
its own redis-server; the certificates are this build's) runs in the same rounds:
"other local" and "other handed", and the ratios other handed / other local, handed /
other handed (what the hand-over costs against that build's, in microseconds) and local /
other local. The handed/local ratio divides by the local cost, so a cheaper local path
raises it; the comparison in the same run says which part moved.

With --profile dist, this build's members run as it ships (Cargo.toml's `dist` profile:
link-time optimisation, one code unit; built first) instead of the release profile the
tests run: set against another build's shipped binary, each build as it ships.

Usage: bench/fleet_bench.py [--seconds 6] [--connections 16] [--rounds 3] [--pause-ms N]
                            [--compare OTHER_ROBOTSGATE_BINARY] [--profile dist]
                            [--alone owner|relay]
Needs wrk, nginx, redis-server and haproxy (installs them if missing). Only processes this script
started are stopped, by PID.
"""

import argparse
import base64
import os
import re
import shutil
import statistics
import subprocess
import time

from benchlib import (ms, cpu_split, switches, prepare, fleet_member, free_port, nginx_binary, start_redis,
                      stop, wait_port, robotsgate_binary)

ORIGINS = 16


def redis_commands(port):
    stats = subprocess.run(["redis-cli", "-p", str(port), "info", "commandstats"], capture_output=True,
                           text=True).stdout
    return sum(int(n) for n in re.findall(r"cmdstat_\w+:calls=(\d+)", stats))


def wrk(args, proxy_port, lua, pids, redis_port):
    split_before = [cpu_split(p) for p in pids]
    switches_before = [switches(p) for p in pids]
    commands_before = redis_commands(redis_port)
    out = subprocess.run(
        ["wrk", "-t1", f"-c{args.connections}", f"-d{args.seconds}s", "--latency", "-s", lua,
         f"http://127.0.0.1:{proxy_port}"],
        capture_output=True, text=True, check=True,
    ).stdout
    split = [tuple(a - b for a, b in zip(cpu_split(p), before)) for p, before in zip(pids, split_before)]
    switched = [tuple(a - b for a, b in zip(switches(p), before)) for p, before in zip(pids, switches_before)]
    each = [user + system for user, system in split]
    requests = int(re.search(r"(\d+) requests in", out).group(1))
    per_request = 1 / max(requests, 1)
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return {
        "rps": float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)),
        # The latency distribution's lines ("     50%  880.00us"), not a "+/- Stdev" column.
        "p50": ms(re.search(r"^\s+50%\s+(\S+)", out, re.M).group(1)),
        "p99": ms(re.search(r"^\s+99%\s+(\S+)", out, re.M).group(1)),
        "cpu_us": sum(each) * per_request * 1e6,
        "each_us": [c * per_request * 1e6 for c in each],
        "user_us": sum(u for u, _ in split) * per_request * 1e6,
        "system_us": sum(k for _, k in split) * per_request * 1e6,
        "voluntary": sum(v for v, _ in switched) * per_request,
        "involuntary": sum(i for _, i in switched) * per_request,
        "redis": (redis_commands(redis_port) - commands_before) * per_request,
        "non2xx": int(errors.group(1)) if errors else 0,
    }


def meet(member_port, ports):
    """One request to each origin on `ports` through the member at `member_port`."""
    for p in ports:
        subprocess.run(["curl", "-s", "-o", "/dev/null", "-x", f"http://127.0.0.1:{member_port}",
                        f"http://127.0.0.1:{p}/index.html"], check=True)


def start_origins(work, started):
    ports = [free_port() for _ in range(ORIGINS)]
    os.makedirs(f"{work}/www")
    with open(f"{work}/www/index.html", "w") as f:
        f.write("<html><body>" + "x" * 512 + "</body></html>\n")
    with open(f"{work}/www/robots.txt", "w") as f:
        f.write("User-agent: *\nDisallow: /private\n")
    listens = "".join(f"listen 127.0.0.1:{p}; " for p in ports)
    with open(f"{work}/nginx.conf", "w") as f:
        f.write(f"""daemon off; worker_processes 1; pid {work}/nginx.pid; error_log {work}/nginx.err;
events {{ worker_connections 4096; }}
http {{ access_log off; keepalive_requests 1000000;
  server {{ {listens} root {work}/www; }} }}
""")
    started.append(subprocess.Popen([nginx_binary(), "-c", f"{work}/nginx.conf", "-p", work]))
    wait_port(ports[0])
    return ports


def start_haproxy(work, owner_peer, prefix=()):
    """HAProxy (one thread, started under `prefix`) relaying every request to the owner's peer channel at
    `owner_peer` as a member would: mutual TLS with the member certificate, checked
    against the fleet CA (member b's, in b's place: the member a connection comes from is
    its certificate's), a fixed peer context, connections reused. Its process and port."""
    with open(f"{work}/b.pem") as cert, open(f"{work}/b.key") as key, \
            open(f"{work}/haproxy-member.pem", "w") as both:
        both.write(cert.read() + key.read())
    context = base64.urlsafe_b64encode(b'{"c":"127.0.0.1"}').decode().rstrip("=")
    port = free_port()
    with open(f"{work}/haproxy.cfg", "w") as f:
        f.write(f"""global
  nbthread 1
  maxconn 4000
defaults
  mode http
  timeout connect 5s
  timeout client 30s
  timeout server 30s
frontend members
  bind 127.0.0.1:{port}
  http-request set-header robotsgate-peer {context}
  default_backend owner
backend owner
  http-reuse always
  server a 127.0.0.1:{owner_peer} ssl crt {work}/haproxy-member.pem ca-file {work}/fleet-ca.pem sni str(robotsgate-fleet) verifyhost robotsgate-fleet alpn http/1.1
""")
    binary = shutil.which("haproxy") or "/usr/sbin/haproxy"
    proc = subprocess.Popen([*prefix, binary, "-db", "-f", f"{work}/haproxy.cfg"], stdout=subprocess.DEVNULL)
    wait_port(port)
    return proc, port


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=int, default=6)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--compare", metavar="OTHER_ROBOTSGATE_BINARY",
                        help="also run a fleet of another build (C owning, D relaying): 'other local', 'other handed'")
    parser.add_argument("--pause-ms", type=float, default=0,
                        help="each connection pauses this long after each answer (0: none, full load)")
    parser.add_argument("--profile", default="release",
                        help="the Cargo profile of this build's members (dist: as it ships)")
    parser.add_argument("--alone", choices=("owner", "relay"), default="owner",
                        help="which member has a CPU to itself: the owner (A, C) or the relay (B, D, HAProxy)")
    args = parser.parse_args()
    work = prepare("fleet-bench", {"wrk": "wrk", "nginx": "nginx-light", "redis-server": "redis-server",
                                   "haproxy": "haproxy"})
    ours = robotsgate_binary(args.profile)
    cpus = sorted(os.sched_getaffinity(0))
    started = []
    try:
        # The member alone on its CPU pinned there; everything else off it (children
        # inherit it).
        alone, others = (cpus[0], cpus[1:]) if args.alone == "owner" else (cpus[-1], cpus[:-1])
        os.sched_setaffinity(0, set(others) or set(cpus))
        pin = ("taskset", "-c", str(alone))
        owner_at, relay_at = (pin, ()) if args.alone == "owner" else ((), pin)
        ports = start_origins(work, started)
        redis_port = start_redis(work, started)
        # A keeps every origin: none follows B's traffic.
        a, a_port, a_peer = fleet_member(work, "a", redis_port, started, owner_at, ours)
        b, b_port, _ = fleet_member(work, "b", redis_port, started, relay_at, ours)
        # Each run: the port it loads and the redis-server of that port's fleet.
        kinds = {"local": (a_port, redis_port), "handed": (b_port, redis_port)}
        members = {"A": a, "B": b}
        owners, relays = [a_port], [b_port]
        if args.compare:  # the other build's fleet, C owning every origin as A does
            other_redis = start_redis(work, started)
            c, c_port, _ = fleet_member(work, "c", other_redis, started, owner_at, args.compare)
            d, d_port, _ = fleet_member(work, "d", other_redis, started, relay_at, args.compare)
            kinds.update({"other local": (c_port, other_redis), "other handed": (d_port, other_redis)})
            members.update({"C": c, "D": d})
            owners.append(c_port)
            relays.append(d_port)
        time.sleep(1.5)  # all registered, each knowing the others
        # Each owner meets every origin first, so owns them all; then each relaying member
        # learns its owner, and its pooled connection to it opens.
        for member_port in owners + relays:
            meet(member_port, ports)
        haproxy, haproxy_port = start_haproxy(work, a_peer, relay_at)
        started.append(haproxy)
        kinds.update({"handed by HAProxy": (haproxy_port, redis_port), "local again": (a_port, redis_port)})
        members["HAProxy"] = haproxy
        names = ", ".join(members)
        pids = [m.pid for m in members.values()]
        lua = f"{work}/rotate.lua"
        with open(lua, "w") as f:
            f.write("local ports = {" + ",".join(map(str, ports)) + "}\nlocal i = 0\n"
                    "request = function()\n  i = i + 1\n  local p = ports[(i % #ports) + 1]\n"
                    "  return wrk.format('GET', 'http://127.0.0.1:' .. p .. '/index.html', {Host = '127.0.0.1:' .. p})\nend\n")
            if args.pause_ms:
                f.write(f"delay = function()\n  return {args.pause_ms}\nend\n")
        order = list(kinds)
        rows = {k: [] for k in kinds}
        paused = f", {args.pause_ms:g} ms pause after each answer" if args.pause_ms else ""
        print(f"wrk -t1 -c{args.connections} -d{args.seconds}s over {ORIGINS} origins{paused}, members threads: 1, "
              f"{'A and C' if args.alone == 'owner' else 'B, D and HAProxy'} alone on CPU {alone}\n")
        print(f"{'round':<6} {'run':<18} {'rps':>8} {'p50 ms':>8} {'p99 ms':>8} {f'CPU µs/req all ({names})':>32} "
              f"{'Redis cmds/req':>15} {'non-2xx':>8}")
        for n in range(args.rounds):
            for kind in order[n % len(order):] + order[:n % len(order)]:
                port, redis = kinds[kind]
                r = wrk(args, port, lua, pids, redis)
                rows[kind].append(r)
                each = ", ".join(f"{c:.1f}" for c in r["each_us"])
                print(f"{n + 1:<6} {kind:<18} {r['rps']:>8.0f} {r['p50']:>8.3f} {r['p99']:>8.3f} "
                      f"{r['cpu_us']:>10.1f} ({each}){'':>2} "
                      f"{r['redis']:>15.4f} {r['non2xx']:>8}", flush=True)
        print()
        for kind in ("handed", "handed by HAProxy", "local again"):
            ratios = [h["cpu_us"] / l["cpu_us"] for h, l in zip(rows[kind], rows["local"])]
            added = [h["p50"] - l["p50"] for h, l in zip(rows[kind], rows["local"])]
            print(f"{kind + '/local:':<26} CPU per request {statistics.median(ratios):.2f}x "
                  f"[{min(ratios):.2f}-{max(ratios):.2f}], p50 {statistics.median(added):+.3f} ms "
                  f"[{min(added):+.3f} to {max(added):+.3f}]")
        # Where the ratio goes: user space (what fleet_instructions.py counts), the
        # kernel's part (system calls, and the wake-ups of members that wait on each other),
        # and how often the processes' threads slept (voluntary) or were preempted.
        print(f"\n{'run':<18} {'user µs/req':>12} {'kernel µs/req':>14} {'slept/req':>10} {'preempted/req':>14}")
        for kind in order:
            r = rows[kind]
            print(f"{kind:<18} {statistics.median(x['user_us'] for x in r):>12.1f} "
                  f"{statistics.median(x['system_us'] for x in r):>14.1f} "
                  f"{statistics.median(x['voluntary'] for x in r):>10.2f} "
                  f"{statistics.median(x['involuntary'] for x in r):>14.2f}")
        for part in ("user_us", "system_us"):
            ratios = [h[part] / max(l[part], 1e-9) for h, l in zip(rows["handed"], rows["local"])]
            print(f"handed/local, {part[:-3]:<12} {statistics.median(ratios):.2f}x "
                  f"[{min(ratios):.2f}-{max(ratios):.2f}]")
        print()
        # The relay against the named baseline in the same rounds: the two runs differ
        # only in which process hands the request over.
        pairs = [("handed", "handed by HAProxy")]
        if args.compare:  # the other build's own ratio, and each run against the other build's
            pairs += [("other handed", "other local"), ("handed", "other handed"), ("local", "other local")]
        for kind, base in pairs:
            ratios = [h["cpu_us"] / p["cpu_us"] for h, p in zip(rows[kind], rows[base])]
            print(f"{kind + '/' + base + ':':<26} CPU per request {statistics.median(ratios):.2f}x "
                  f"[{min(ratios):.2f}-{max(ratios):.2f}]")
    finally:
        stop(started)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
