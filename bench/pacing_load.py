#!/usr/bin/env python3
"""Pacing under load: thousands of requests over 50 origins with mixed Crawl-delays.

Starts 50 origins on 127.0.0.1 (asyncio), each with `Crawl-delay` 0.05, 0.1 or 0.2 s and
logging when each request arrived and when its response was written; starts robotsgate
(release build) in front of them; fires the requests at once through the proxy with a
bounded number in flight. Then, at every origin, checks every gap between one
response's end and the next request's arrival (the robots.txt fetch included) against
the delay and prints: requests, origins, violations, smallest gap/delay ratio, and the
mean excess wait over the ideal schedule. Exits 1 on any violation.

With `--no-crawl-delay` the origins publish no Crawl-delay and answer after
`--response-ms` (20): the run is made twice in one go, with the default
`pacing.max_in_flight: 2` and with the limit off (0), and prints the most requests any
origin served at once (must be ≤ 2 with the limit) and the throughput cost of the limit.

With `--instances N` (N > 1) it runs a fleet: a redis-server on loopback and N robotsgate
processes sharing it (`fleet.redis`), the requests spread over them in turn; the gaps
at the origins must hold fleet-wide.

Usage: bench/pacing_load.py [--requests 3000] [--origins 50] [--in-flight 300] [--instances 1]
"""

import argparse
import asyncio
import multiprocessing
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

from benchlib import ROOT, fleet_certs, free_port
from origins import most_at_once, serve_origins
from benchlib import stop as stop_processes

DELAYS = [0.05, 0.1, 0.2]


async def fetch(proxy_port, url, host):
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy_port)
    writer.write(f"GET {url} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: LoadBot/1.0\r\nConnection: close\r\n\r\n".encode())
    await writer.drain()
    data = await reader.read()
    writer.close()
    return int(data.split(b" ", 2)[1]) if data else 0


async def wait_for(port):
    deadline = time.time() + 20
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            if time.time() > deadline:
                sys.exit(f"nothing listening on {port}")
            await asyncio.sleep(0.05)


async def run_once(args, delays, response_s, pacing):
    """One load through fresh origins and robotsgate processes: (statuses, wall seconds, logs)."""
    ports_q, logs_q, stop = multiprocessing.Queue(), multiprocessing.Queue(), multiprocessing.Event()
    origin_process = multiprocessing.Process(target=serve_origins,
                                             args=(args.origins, delays, response_s, ports_q, logs_q, stop))
    origin_process.start()
    origin_ports = ports_q.get(timeout=20)

    work = tempfile.mkdtemp(prefix="robotsgate-pacing-")
    started, ports = [], []
    fleet = ""
    if args.instances > 1:
        redis_port = free_port()
        started.append(subprocess.Popen(["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "",
                                         "--appendonly", "no", "--dir", work], stdout=subprocess.DEVNULL))
        await wait_for(redis_port)
        fleet = f"  fleet:\n    redis: redis://127.0.0.1:{redis_port}/0\n"
    for i in range(args.instances):
        conf = f"{work}/rg{i}.yaml"
        with open(conf, "w") as f:
            f.write(f"version: 1\nthreads: 2\npid_file: {work}/pid{i}\nupgrade_sock: {work}/sock{i}\ngrace_period_seconds: 0\n"
                    f"graceful_shutdown_timeout_seconds: 1\nrobotsgate:\n  admin_listen: null\n"
                    f"  pacing:\n    max_wait_seconds: 600\n    max_queue: 100000\n{pacing}{fleet}"
                    f"{fleet_certs(work, f'rg{i}') if fleet else ''}")
        port = free_port()
        started.append(subprocess.Popen([f"{ROOT}/target/release/robotsgate", "run", "--config", conf, "--listen",
                                         f"127.0.0.1:{port}", "--allow-destination", "127.0.0.0/8",
                                         *(["--peer-listen", f"127.0.0.1:{free_port()}"] if fleet else [])],
                                        env={**os.environ, "RUST_LOG": "warn"}, stderr=open(f"{work}/rg{i}.log", "w")))
        ports.append(port)
    try:
        for port in ports:
            await wait_for(port)
        if fleet:
            await asyncio.sleep(1.5)  # each instance's health check marks the backend up

        limit = asyncio.Semaphore(args.in_flight)

        async def one(n):
            origin_port = origin_ports[n % len(origin_ports)][0]
            host = f"127.0.0.1:{origin_port}"
            async with limit:
                return await fetch(ports[n % len(ports)], f"http://{host}/page/{n}", host)

        start = time.monotonic()
        statuses = await asyncio.wait_for(asyncio.gather(*(one(n) for n in range(args.requests))), timeout=args.timeout)
        elapsed = time.monotonic() - start
    finally:
        stop_processes(started)
        stop.set()
        logs = logs_q.get(timeout=20)
        origin_process.join(timeout=5)
        shutil.rmtree(work, ignore_errors=True)
    return statuses, elapsed, logs


async def no_crawl_delay(args):
    limited = await run_once(args, [None], args.response_ms / 1000, "    max_in_flight: 2\n")
    unlimited = await run_once(args, [None], args.response_ms / 1000, "    max_in_flight: 0\n")
    failed = 0
    for name, (statuses, elapsed, logs) in (("max_in_flight 2", limited), ("unlimited", unlimited)):
        ok = sum(1 for s in statuses if s == 200)
        most = max(most_at_once(log) for _, _, log in logs)
        print(f"{name:<16} requests {len(statuses)} (200: {ok}), origins {len(logs)}, response {args.response_ms} ms, "
              f"wall {elapsed:.2f} s, {len(statuses) / elapsed:.0f} req/s, most at once at one origin {most}")
        failed |= ok != len(statuses)
        if name.startswith("max") and most > 2:
            print("violation: an origin served more than 2 requests at once")
            failed = 1
    print(f"throughput with the limit / without: {(len(limited[0]) / limited[1]) / (len(unlimited[0]) / unlimited[1]):.2f}x")
    return failed


async def main(args):
    subprocess.run(["cargo", "build", "--release", "--quiet", "--bin", "robotsgate"], cwd=ROOT, check=True)
    if args.no_crawl_delay:
        return await no_crawl_delay(args)
    statuses, elapsed, logs = await run_once(args, DELAYS, 0, "")
    violations, excess, ratios, gaps = 0, [], [], 0
    for port, delay, log in logs:
        log = sorted(log, key=lambda e: e[1])
        for prev, nxt in zip(log, log[1:]):
            gap = nxt[1] - prev[2]
            gaps += 1
            ratios.append(gap / delay)
            excess.append(gap - delay)
            if gap < delay:
                violations += 1
                print(f"violation at :{port}: {prev[0]} -> {nxt[0]} gap {gap * 1000:.1f} ms < {delay * 1000:.0f} ms")
    ok = sum(1 for s in statuses if s == 200)
    print(f"requests {len(statuses)} (200: {ok}, other: {len(statuses) - ok}), origins {len(logs)}, "
          f"delays {DELAYS} s, instances {args.instances}, wall {elapsed:.1f} s")
    print(f"gaps checked {gaps}, violations {violations}, smallest gap/delay {min(ratios):.3f}, "
          f"mean excess wait over ideal {sum(excess) / len(excess) * 1000:.2f} ms per request")
    return 1 if violations or ok != len(statuses) else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--origins", type=int, default=50)
    parser.add_argument("--in-flight", type=int, default=300)
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument("--instances", type=int, default=1)
    parser.add_argument("--no-crawl-delay", action="store_true")
    parser.add_argument("--response-ms", type=int, default=20)
    sys.exit(asyncio.run(main(parser.parse_args())))
