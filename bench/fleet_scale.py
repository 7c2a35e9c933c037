#!/usr/bin/env python3
"""Fleet mode as the fleet grows: what each request costs Redis, and whether the
origins were kept, for 1, 2, 4 and 8 robotsgate instances on one redis-server (and 8 on
a three-master Redis Cluster with --cluster).

The load: 50 loopback origins (bench/origins.py, in a process of their own, each on its
own port, logging when each request arrives and ends; fresh for each run), a tenth with Crawl-delay
0.5, a fifth with Crawl-delay 0.2, the rest with none, each disallowing /private/;
32 client threads sending GETs through random instances to random origins (one in ten
to a disallowed path) for --seconds.

Printed per fleet size: requests answered per second; Redis script calls (EVALSHA) per
request forwarded beyond the fleet's idle upkeep (each origin's first claim only: the
design's figure is 0 in the steady state); Redis CPU per second (INFO cpu) idle (lease
renewals and health checks, measured for a few seconds before the load) and under the
load, and their ratio; the share of requests handed over to another member; and the
origins' verdict: requests that reached a disallowed path, gaps below a Crawl-delay,
and the most requests in flight at once at one origin against max_in_flight (2); and
robotsgate's own CPU per answered request, every instance counted (utime + stime), so a
hand-over's cost shows against the one-instance run; and how many origins followed their
traffic to another member during the load (`how="followed"`; random routing should move
none).

With --front, each fleet size runs twice: clients through random instances, then through
HAProxy routing by host (`balance hdr(host)`, `hash-type consistent`, the README's
routing guide) in front of the same fleet.

Usage: bench/fleet_scale.py [--seconds 12] [--sizes 1,2,4,8] [--cluster] [--front]
Needs redis-server (and haproxy with --front; installs them if missing). Only processes this script started are
stopped, by PID.
"""

import argparse
import multiprocessing
import os
import random
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.request

from benchlib import (ROOT, cpu_seconds, prepare, fleet_certs, free_port, robotsgate_config, stop,
                      wait_port)
from origins import most_at_once, serve_origins

ORIGINS = 50
IDLE_SECONDS = 4
CLIENTS = 32
OWNERSHIP = "robotsgate_fleet_ownership_changes_total"


# A tenth of the origins with Crawl-delay 0.5, a fifth with 0.2, the rest none.
DELAYS = [0.5 if i % 10 == 0 else 0.2 if i % 5 == 1 else None for i in range(ORIGINS)]


def redis_cli(port, *args):
    return subprocess.run(["redis-cli", "-p", str(port), *args], capture_output=True, text=True).stdout


def redis_detail(ports):
    """Redis CPU split into user and system time and the time spent inside each
    command (INFO commandstats usec), in µs, summed over `ports`."""
    out = {}
    for port in ports:
        info = redis_cli(port, "info", "cpu")
        for kind in ("user", "sys"):
            out[f"cpu_{kind}"] = out.get(f"cpu_{kind}", 0) + 1e6 * sum(
                float(v) for v in re.findall(rf"used_cpu_{kind}:([\d.]+)", info))
        stats = redis_cli(port, "info", "commandstats")
        for name, usec in re.findall(r"cmdstat_([\w|]+):calls=\d+,usec=(\d+)", stats):
            out[name] = out.get(name, 0) + int(usec)
    return out


def redis_counters(ports):
    """(script calls, Redis CPU seconds) summed over `ports`."""
    calls = cpu = 0.0
    for port in ports:
        stats = redis_cli(port, "info", "commandstats")
        calls += sum(int(n) for n in re.findall(r"cmdstat_evalsha?:calls=(\d+)", stats))
        info = redis_cli(port, "info", "cpu")
        cpu += sum(float(v) for v in re.findall(r"used_cpu_(?:sys|user):([\d.]+)", info))
    return calls, cpu


def metric(admin_port, name):
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{admin_port}/metrics", timeout=2).read().decode()
    except OSError:
        return 0.0
    found = re.search(rf"^{name} ([\d.e+]+)$", text, re.M)
    return float(found.group(1)) if found else 0.0


def metric_sum(admin_port, name, label):
    """The sum of metric `name` over its series whose labels contain `label`."""
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{admin_port}/metrics", timeout=2).read().decode()
    except OSError:
        return 0.0
    return sum(float(m.group(1)) for m in re.finditer(rf"^{name}{{[^}}]*{re.escape(label)}[^}}]*}} ([\d.e+]+)$", text, re.M))


def verdict(logs):
    """The origins' logs judged: (pages forwarded, disallowed reached, short gaps, most
    at once at one origin). The warm-up requests and robots.txt fetches are left out."""
    pages = leaks = short = most = 0
    for _, delay, log in logs:
        seen = sorted((e for e in log if e[0].startswith(("/p/", "/private/"))), key=lambda e: e[1])
        pages += len(seen)
        leaks += sum(1 for path, _, _ in seen if path.startswith("/private/"))
        if delay:
            short += sum(1 for prev, nxt in zip(seen, seen[1:]) if nxt[1] - prev[2] < delay - 0.001)
        most = max(most, most_at_once(seen))
    return pages, leaks, short, most


def start_redis(work, cluster, pin):
    """Redis (three Cluster masters with `cluster`), on the last core alone with `pin`."""
    started, ports = [], []
    taskset = ["taskset", "-c", str(os.cpu_count() - 1)] if pin else []
    for _ in range(3 if cluster else 1):
        port = free_port()
        # A Cluster node also listens on port + 10000 (its bus): at most 55535.
        while cluster and port > 55535:
            port = free_port()
        extra = ["--cluster-enabled", "yes", "--cluster-config-file", f"{work}/nodes-{port}.conf"] if cluster else []
        started.append(subprocess.Popen([*taskset, "redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                         "--appendonly", "no", "--dir", work, *extra], stdout=subprocess.DEVNULL))
        ports.append(port)
        wait_port(port)
    if cluster:
        subprocess.run(["redis-cli", "--cluster", "create", *[f"127.0.0.1:{p}" for p in ports],
                        "--cluster-replicas", "0", "--cluster-yes"], check=True, capture_output=True)
        deadline = time.time() + 20
        while not all("cluster_state:ok" in redis_cli(p, "cluster", "info") for p in ports):
            if time.time() > deadline:
                sys.exit("cluster did not form")
            time.sleep(0.1)
    return started, ports


def start_front(work, instances):
    """HAProxy routing each host to one of `instances` (the README's routing guide): the
    process and its port."""
    port = free_port()
    servers = "".join(f"  server m{i} 127.0.0.1:{p} check\n" for i, (p, _) in enumerate(instances))
    config = f"{work}/haproxy-{port}.cfg"
    with open(config, "w") as f:
        f.write("global\n  maxconn 2000\ndefaults\n  mode http\n  timeout connect 5s\n  timeout client 60s\n"
                f"  timeout server 60s\nfrontend crawlers\n  bind 127.0.0.1:{port}\n  default_backend fleet\n"
                f"backend fleet\n  balance hdr(host)\n  hash-type consistent\n{servers}")
    haproxy = shutil.which("haproxy") or "/usr/sbin/haproxy"
    proc = subprocess.Popen([haproxy, "-db", "-f", config], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(port)
    return proc, port


def run(args, size, cluster, front, work):
    """One fleet size, against fresh origins (run in a process of their own); clients
    through HAProxy with `front`, else through random instances."""
    ports_q, logs_q, stop_origins = multiprocessing.Queue(), multiprocessing.Queue(), multiprocessing.Event()
    origins = multiprocessing.Process(target=serve_origins, args=(ORIGINS, DELAYS, 0.005, ports_q, logs_q,
                                                                   stop_origins, "/private/"))
    origins.start()
    origin_ports = [port for port, _ in ports_q.get(timeout=20)]
    started = []
    redis_dir = f"{work}/redis-{size}{'-cluster' if cluster else ''}"
    os.makedirs(redis_dir, exist_ok=True)
    redis_procs, redis_ports = start_redis(redis_dir, cluster, not args.together)
    started += redis_procs
    fleet = (f"    redis_cluster: [{', '.join(f'redis://127.0.0.1:{p}' for p in redis_ports)}]\n" if cluster
             else f"    redis: redis://127.0.0.1:{redis_ports[0]}/0\n")
    instances, members = [], []
    try:
        for n in range(size):
            admin = free_port()
            path = robotsgate_config(work, f"rg{size}-{n}",
                                     f"  admin_listen: 127.0.0.1:{admin}\n  fleet:\n{fleet}{fleet_certs(work, f'rg{size}-{n}')}"
                                     "  pacing:\n    max_wait_seconds: 30\n    max_queue: 1000\n"
                                     "    adaptive:\n      enabled: false\n")
            port = free_port()
            proc = subprocess.Popen([f"{ROOT}/target/release/robotsgate", "run", "--config", path, "--listen",
                                     f"127.0.0.1:{port}", "--peer-listen", f"127.0.0.1:{free_port()}",
                                     "--allow-destination", "127.0.0.0/8", "--agent", "ExampleBot"],
                                    env={**os.environ, "RUST_LOG": "warn"}, stderr=open(f"{work}/rg{size}-{n}.log", "w"))
            started.append(proc)
            instances.append((port, admin))
            members.append(proc)
        for port, admin in instances:
            wait_port(port)
            deadline = time.time() + 20
            while True:
                try:
                    if urllib.request.urlopen(f"http://127.0.0.1:{admin}/readyz", timeout=2).status == 200:
                        break
                except OSError:
                    pass
                if time.time() > deadline:
                    sys.exit("fleet backend never came up")
                time.sleep(0.1)
        # Warm: every instance holds every origin's robots.txt (through the front with
        # one: the instance it picks for a host meets the host first, and owns it).
        entries = [p for p, _ in instances]
        if front:
            haproxy, front_port = start_front(work, instances)
            started.append(haproxy)
            entries = [front_port]
        for port in entries:
            proxy = urllib.request.ProxyHandler({"http": f"http://127.0.0.1:{port}"})
            opener = urllib.request.build_opener(proxy)
            for o in origin_ports:
                try:
                    opener.open(f"http://127.0.0.1:{o}/warm", timeout=30).read()
                except OSError:
                    pass
        time.sleep(1)
        # Idle: the fleet's own upkeep (lease renewals, health checks), per second.
        idle_calls0, idle_cpu0 = redis_counters(redis_ports)
        time.sleep(IDLE_SECONDS)
        idle_calls1, idle_cpu1 = redis_counters(redis_ports)
        calls0, cpu0 = redis_counters(redis_ports)
        detail0 = redis_detail(redis_ports)
        handed0 = sum(metric_sum(a, "robotsgate_requests_total", 'decision="handed_over"') for _, a in instances)
        followed0 = sum(metric_sum(a, OWNERSHIP, 'how="followed"') for _, a in instances)
        rg_cpu0 = sum(cpu_seconds(m.pid) for m in members)
        begin = time.monotonic()
        end = begin + args.seconds
        answered = [0]
        lock = threading.Lock()

        def client(seed):
            rng = random.Random(seed)
            openers = [urllib.request.build_opener(urllib.request.ProxyHandler({"http": f"http://127.0.0.1:{p}"}))
                       for p in entries]
            k = 0
            while time.monotonic() < end:
                k += 1
                o = rng.choice(origin_ports)
                path = f"/private/{seed}-{k}" if rng.random() < 0.1 else f"/p/{seed}-{k}"
                try:
                    rng.choice(openers).open(f"http://127.0.0.1:{o}{path}", timeout=40).read()
                except urllib.error.HTTPError:
                    pass
                except OSError:
                    continue
                with lock:
                    answered[0] += 1

        threads = [threading.Thread(target=client, args=(s,)) for s in range(CLIENTS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.monotonic() - begin
        rg_cpu1 = sum(cpu_seconds(m.pid) for m in members)
        time.sleep(1)
        calls1, cpu1 = redis_counters(redis_ports)
        loaded = time.monotonic() - begin
        detail1 = redis_detail(redis_ports)
        handed1 = sum(metric_sum(a, "robotsgate_requests_total", 'decision="handed_over"') for _, a in instances)
        followed1 = sum(metric_sum(a, OWNERSHIP, 'how="followed"') for _, a in instances)
        stop_origins.set()
        pages, leaks, short, most = verdict(logs_q.get(timeout=20))
        forwarded = max(pages, 1)
        idle_cpu = (idle_cpu1 - idle_cpu0) / IDLE_SECONDS
        load_cpu = (cpu1 - cpu0) / loaded
        return {
            "rps": answered[0] / elapsed, "answered": answered[0], "pages": pages,
            "calls": (calls1 - calls0 - (idle_calls1 - idle_calls0) * loaded / IDLE_SECONDS) / forwarded,
            "idle_ms": idle_cpu * 1e3, "load_ms": load_cpu * 1e3,
            "handed": (handed1 - handed0) / max(answered[0], 1),
            "followed": int(followed1 - followed0),
            "rg_us": (rg_cpu1 - rg_cpu0) / max(answered[0], 1) * 1e6,
            "leaks": leaks, "short": short, "most": most,
            "detail": {k: (detail1.get(k, 0) - detail0.get(k, 0)) / forwarded for k in detail1},
        }
    finally:
        stop(started)
        stop_origins.set()
        origins.join(timeout=5)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=12)
    parser.add_argument("--sizes", default="1,2,4,8")
    parser.add_argument("--cluster", action="store_true", help="also 8 instances on a three-master Cluster")
    parser.add_argument("--front", action="store_true", help="each size also with HAProxy routing by host in front")
    parser.add_argument("--together", action="store_true",
                        help="Redis shares the cores with the load (by default it has the last core alone)")
    parser.add_argument("--detail", action="store_true",
                        help="also Redis' user and system CPU and the time inside each command, per forwarded request")
    args = parser.parse_args()
    if not args.together:
        # Redis alone on the last core, everything else (instances, origins, clients:
        # children inherit this) on the others: Redis' CPU per request is then its own,
        # not inflated by being preempted mid-script by the load it serves.
        os.sched_setaffinity(0, set(range(os.cpu_count() - 1)))
    work = prepare("fleet-scale", {"redis-server": "redis-server", **({"haproxy": "haproxy"} if args.front else {})})
    try:
        runs = [(int(s), False, front) for s in args.sizes.split(",") for front in ([False, True] if args.front else [False])]
        runs += [(8, True, False)] if args.cluster else []
        print(f"{CLIENTS} clients, {ORIGINS} origins, {args.seconds:.0f} s per run, max_in_flight 2\n")
        print(f"{'instances':<14} {'answered/s':>10} {'scripts/fwd':>11} {'Redis ms/s idle':>15} "
              f"{'Redis ms/s load':>15} {'ratio':>6} {'handed over':>11} {'leaks':>6} {'short gaps':>10} "
              f"{'most at once':>12} {'rg µs/req':>9} {'followed':>8}")
        for size, cluster, front in runs:
            r = run(args, size, cluster, front, work)
            label = f"{size}{' (Cluster)' if cluster else ''}{' HAProxy' if front else ''}"
            ratio = r["load_ms"] / max(r["idle_ms"], 1e-9)
            print(f"{label:<14} {r['rps']:>10.0f} {r['calls']:>11.3f} {r['idle_ms']:>15.2f} "
                  f"{r['load_ms']:>15.2f} {ratio:>6.2f} {r['handed']:>11.1%} {r['leaks']:>6} {r['short']:>10} "
                  f"{r['most']:>12} {r['rg_us']:>9.0f} {r['followed']:>8}", flush=True)
            if args.detail:
                top = sorted(r["detail"].items(), key=lambda kv: -kv[1])[:8]
                print("    µs/fwd: " + ", ".join(f"{k} {v:.1f}" for k, v in top), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
