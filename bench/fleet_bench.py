#!/usr/bin/env python3
"""Fleet mode's cost: robotsgate with the Redis backend vs the embedded one, in one run.

Everything runs on 127.0.0.1: nginx serving 16 origins (one port each, robots.txt with
no Crawl-delay), a redis-server, and two robotsgate processes (`threads: 1`): one
embedded, one with `fleet.redis`. wrk sends GETs rotating over the 16 origins, twice per
backend:

* unpaced — no delay and no in-flight limit in force (`max_in_flight: 0`): the fleet
  backend must not be touched on the hot path;
* in-flight — no delay, `max_in_flight: 2` (the default): every request takes an
  in-flight turn, locally or from Redis;
* paced — `pacing.floor_seconds: 0.002` makes every origin paced (one request at a time,
  2 ms apart) with `max_in_flight: 2`: every request takes both turns.

For each row: requests/s, p50/p99 latency, robotsgate CPU µs per request (utime+stime of
the whole process from /proc), and for the Redis rows the Redis commands per request
(INFO commandstats, the backend's health pings subtracted) and Redis CPU µs per request.
Then the ratios Redis/embedded, and the bytes one origin takes in Redis (MEMORY USAGE).

Usage: bench/fleet_bench.py [--seconds 8] [--connections 16]
Needs wrk, nginx and redis-server (installs them if missing). Only processes this script
started are stopped, by PID.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

from benchlib import POOL, ROOT, ms, cpu_seconds, ensure_packages, free_port, nginx_binary, robotsgate_config, stop, wait_port

ORIGINS = 16


def redis_cli(port, *args):
    return subprocess.run(["redis-cli", "-p", str(port), *args], capture_output=True, text=True).stdout


def commands(port):
    """Round-trips so far (script calls: every command robotsgate sends on the request
    path is one script; health PINGs are not counted), and commands run inside them."""
    stats = redis_cli(port, "info", "commandstats")
    calls = dict((name, int(n)) for name, n in re.findall(r"cmdstat_(\w+):calls=(\d+)", stats))
    trips = calls.get("evalsha", 0) + calls.get("eval", 0)
    return trips, sum(calls.values()) - calls.get("ping", 0) - trips


def wrk(args, proxy_port, lua, pid, redis):
    before = cpu_seconds(pid)
    redis_before = cpu_seconds(redis.pid)
    trips_before, inner_before = commands(redis.redis_port)
    out = subprocess.run(
        ["wrk", "-t1", f"-c{args.connections}", f"-d{args.seconds}s", "--latency", "-s", lua,
         f"http://127.0.0.1:{proxy_port}"],
        capture_output=True, text=True, check=True,
    ).stdout
    cpu = cpu_seconds(pid) - before
    trips_after, inner_after = commands(redis.redis_port)
    requests = int(re.search(r"(\d+) requests in", out).group(1))
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return {
        "rps": float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)),
        "p50": ms(re.search(r"50%\s+(\S+)", out).group(1)),
        "p99": ms(re.search(r"99%\s+(\S+)", out).group(1)),
        "cpu_us": cpu / max(requests, 1) * 1e6,
        "redis_trips": (trips_after - trips_before) / max(requests, 1),
        "redis_inner": (inner_after - inner_before) / max(requests, 1),
        "redis_cpu_us": (cpu_seconds(redis.pid) - redis_before) / max(requests, 1) * 1e6,
        "non2xx": int(errors.group(1)) if errors else 0,
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=int, default=8)
    parser.add_argument("--connections", type=int, default=16)
    args = parser.parse_args()
    ensure_packages({"wrk": "wrk", "nginx": "nginx-light", "redis-server": "redis-server"})
    subprocess.run(["cargo", "build", "--release", "--quiet", "--bin", "robotsgate"], cwd=ROOT, check=True)

    work = tempfile.mkdtemp(prefix="robotsgate-fleet-bench-")
    os.chmod(work, 0o755)
    started = []
    try:
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
        nginx = subprocess.Popen([nginx_binary(), "-c", f"{work}/nginx.conf", "-p", work])
        started.append(nginx)
        wait_port(ports[0])

        redis_port = free_port()
        redis = subprocess.Popen(["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "",
                                  "--appendonly", "no", "--dir", work], stdout=subprocess.DEVNULL)
        redis.redis_port = redis_port
        started.append(redis)
        wait_port(redis_port)

        env = {**os.environ, "RUST_LOG": "warn"}

        def robotsgate(name, fleet, floor, in_flight):
            shared = f"  fleet:\n    redis: redis://127.0.0.1:{redis_port}/0\n" if fleet else ""
            path = robotsgate_config(work, name, "  admin_listen: null\n"
                                     f"  pacing:\n    floor_seconds: {floor}\n    margin_seconds: 0\n"
                                     f"    max_wait_seconds: 30\n    max_queue: 1000\n    max_in_flight: {in_flight}\n"
                                     f"{shared}", POOL)
            port = free_port()
            proc = subprocess.Popen([f"{ROOT}/target/release/robotsgate", "run", "--config", path, "--listen",
                                     f"127.0.0.1:{port}", "--allow-destination", "127.0.0.0/8", "--agent", "ExampleBot"],
                                    env=env, stderr=open(f"{work}/{name}.log", "w"))
            started.append(proc)
            wait_port(port)
            return proc, port

        lua = f"{work}/rotate.lua"
        with open(lua, "w") as f:
            f.write("local ports = {" + ",".join(map(str, ports)) + "}\nlocal i = 0\n"
                    "request = function()\n  i = i + 1\n  local p = ports[(i % #ports) + 1]\n"
                    "  return wrk.format('GET', 'http://127.0.0.1:' .. p .. '/index.html', {Host = '127.0.0.1:' .. p})\nend\n")

        rows = {}
        for kind, floor, in_flight in (("unpaced", 0, 0), ("in-flight", 0, 2), ("paced", 0.002, 2)):
            for backend in ("embedded", "redis"):
                proc, port = robotsgate(f"{backend}-{kind}", backend == "redis", floor, in_flight)
                # Warm every origin's robots.txt: cached decisions are what is measured.
                for p in ports:
                    subprocess.run(["curl", "-s", "-o", "/dev/null", "-x", f"http://127.0.0.1:{port}",
                                    f"http://127.0.0.1:{p}/index.html"], check=True)
                time.sleep(0.2)
                rows[(kind, backend)] = wrk(args, port, lua, proc.pid, redis)
                stop([proc])
                started.remove(proc)

        print(f"\nwrk -t1 -c{args.connections} -d{args.seconds}s over {ORIGINS} origins on 127.0.0.1, robotsgate threads: 1\n")
        print(f"{'requests':<9} {'backend':<9} {'rps':>9} {'p50 ms':>8} {'p99 ms':>8} {'CPU µs/req':>11} "
              f"{'Redis trips/req':>15} {'(commands)':>10} {'Redis µs/req':>13} {'non-2xx':>8}")
        for (kind, backend), r in rows.items():
            print(f"{kind:<9} {backend:<9} {r['rps']:>9.0f} {r['p50']:>8.3f} {r['p99']:>8.3f} {r['cpu_us']:>11.1f} "
                  f"{r['redis_trips']:>15.2f} {r['redis_inner']:>10.1f} {r['redis_cpu_us']:>13.1f} {r['non2xx']:>8}")
        print()
        for kind in ("unpaced", "in-flight", "paced"):
            e, r = rows[(kind, "embedded")], rows[(kind, "redis")]
            print(f"{kind:<9} redis/embedded: CPU per request {r['cpu_us'] / e['cpu_us']:.2f}x, "
                  f"p50 {r['p50'] - e['p50']:+.3f} ms, p99 {r['p99'] - e['p99']:+.3f} ms, "
                  f"{r['redis_trips']:.2f} Redis round-trips per request")
        origin = f"http://127.0.0.1:{ports[0]}"
        keys = redis_cli(redis_port, "--scan", "--pattern", f"rg:{{{origin}}}*").split()
        sizes = {k: int(redis_cli(redis_port, "memory", "usage", k).strip() or 0) for k in keys}
        print(f"\nRedis bytes for one origin: {sum(sizes.values())} " + ", ".join(f"{k} {v}" for k, v in sizes.items()))
    finally:
        stop(started)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
