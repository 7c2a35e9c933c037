#!/usr/bin/env python3
"""wrk through robotsgate vs a bare Pingora passthrough vs nginx direct, in one run.

Everything runs on 127.0.0.1: an nginx origin (small page + robots.txt), robotsgate and
examples/passthrough.rs (same Pingora setup, no robots/egress/DNS work), each with
`threads: 1`. robotsgate runs twice: access log off (`RUST_LOG=warn`) and on (`info`,
written to a file, as the journal would take it). For keep-alive and `Connection: close`
it runs wrk against each and prints requests/s, p50/p99 latency and the proxy's CPU time
per request (utime+stime of the whole process from /proc, all threads), then the ratios
robotsgate / passthrough.

Usage: bench/proxy_bench.py [--seconds 8] [--connections 32] [--compare OTHER_ROBOTSGATE_BINARY]
With --compare, a second robotsgate (another build, e.g. the previous commit's) runs in the
same run as a third proxy row, "other", and its ratios to the passthrough are printed too.
Needs wrk and nginx (Debian packages `wrk`, `nginx-light`); installs them if missing.
Only processes this script started are stopped, by PID.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

from benchlib import POOL, ROOT, ms, cpu_seconds, ensure_packages, free_port, nginx_binary, robotsgate_config, stop, wait_port




def wrk(args, url, lua, pid):
    before = cpu_seconds(pid) if pid else 0.0
    out = subprocess.run(
        ["wrk", "-t1", f"-c{args.connections}", f"-d{args.seconds}s", "--latency", "-s", lua, url],
        capture_output=True, text=True, check=True,
    ).stdout
    cpu = (cpu_seconds(pid) - before) if pid else 0.0
    found = re.search(r"(\d+) requests in", out)
    if not found:
        sys.exit(f"wrk against {url} printed no result:\n{out}")
    requests = int(found.group(1))
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return {
        "rps": float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)),
        "p50": ms(re.search(r"50%\s+(\S+)", out).group(1)),
        "p99": ms(re.search(r"99%\s+(\S+)", out).group(1)),
        "cpu_us": cpu / max(requests, 1) * 1e6,
        "non2xx": int(errors.group(1)) if errors else 0,
        "requests": requests,
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=int, default=8)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--compare", help="another robotsgate binary, measured in the same run")
    parser.add_argument("--compare-limit", action="store_true",
                        help="the other binary knows pacing.max_in_flight: turn it off there too")
    args = parser.parse_args()
    ensure_packages({"wrk": "wrk", "nginx": "nginx-light"})
    subprocess.run(["cargo", "build", "--release", "--quiet", "--bin", "robotsgate", "--example", "passthrough"], cwd=ROOT, check=True)

    work = tempfile.mkdtemp(prefix="robotsgate-bench-")
    os.chmod(work, 0o755)  # nginx workers run unprivileged and must read the files
    started = []
    try:
        nginx_port, rg_port, pt_port, other_port, log_port = (free_port() for _ in range(5))
        os.makedirs(f"{work}/www")
        with open(f"{work}/www/index.html", "w") as f:
            f.write("<html><body>" + "x" * 512 + "</body></html>\n")
        with open(f"{work}/www/robots.txt", "w") as f:
            # The large benchmark file without its Crawl-delay lines: this measures the
            # per-request cost of cached decisions, not pacing (bench/pacing_load.py does).
            rules = open(f"{ROOT}/tests/data/large_robots.txt").read().splitlines()
            f.write("\n".join(l for l in rules if not l.lower().startswith("crawl-delay")) + "\n")
        with open(f"{work}/nginx.conf", "w") as f:
            f.write(f"""daemon off; worker_processes 1; pid {work}/nginx.pid; error_log {work}/nginx.err;
events {{ worker_connections 4096; }}
http {{ access_log off; keepalive_requests 1000000;
  server {{ listen 127.0.0.1:{nginx_port}; root {work}/www; }} }}
""")
        nginx = subprocess.Popen([nginx_binary(), "-c", f"{work}/nginx.conf", "-p", work])
        started.append(nginx)
        wait_port(nginx_port)

        def conf(name, extra=""):
            return robotsgate_config(work, name, f"  admin_listen: null\n{extra}", POOL)

        # One origin and 32 connections: the in-flight limit (2 per origin) would make
        # this a measure of politeness, not of the cost of a cached decision; it is off
        # here (bench/pacing_load.py --no-crawl-delay measures the limit).
        no_limit = "  pacing:\n    max_in_flight: 0\n"

        env = {**os.environ, "RUST_LOG": "warn"}

        def robotsgate(binary, name, port, extra, log_level="warn"):
            """A robotsgate judging as ExampleBot; `log_level` info turns the access log on."""
            proc = subprocess.Popen([binary, "run", "--config", conf(name, extra), "--listen", f"127.0.0.1:{port}",
                                     "--allow-destination", "127.0.0.0/8", "--agent", "ExampleBot"],
                                    env={**os.environ, "RUST_LOG": log_level}, stderr=open(f"{work}/{name}.log", "w"))
            started.append(proc)
            return proc

        rgbin = f"{ROOT}/target/release/robotsgate"
        rg = robotsgate(rgbin, "rg", rg_port, no_limit)
        rg_log = robotsgate(rgbin, "rglog", log_port, no_limit, log_level="info")
        pt = subprocess.Popen([f"{ROOT}/target/release/examples/passthrough", conf("pt"), f"127.0.0.1:{pt_port}"], env=env,
                              stderr=open(f"{work}/pt.log", "w"))
        started.append(pt)
        wait_port(rg_port)
        wait_port(log_port)
        wait_port(pt_port)
        other = None
        if args.compare:
            other = robotsgate(args.compare, "other", other_port, no_limit if args.compare_limit else "")
            wait_port(other_port)

        origin = f"127.0.0.1:{nginx_port}"
        # Warm robotsgate's robots.txt cache: "cached decisions" is what is measured.
        for port in (rg_port, log_port, other_port) if other else (rg_port, log_port):
            subprocess.run(["curl", "-s", "-o", "/dev/null", "-x", f"http://127.0.0.1:{port}", f"http://{origin}/index.html"], check=True)

        for port in (nginx_port,):
            check = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", f"http://127.0.0.1:{port}/index.html"],
                                   capture_output=True, text=True).stdout
            if check != "200":
                sys.exit(f"nginx answers {check}, not 200: see {work}/nginx.err")
        rows = {}
        for mode in ("keep-alive", "close"):
            header = 'wrk.headers["Connection"] = "close"\n' if mode == "close" else ""
            direct_lua = f"{work}/direct-{mode}.lua"
            proxy_lua = f"{work}/proxy-{mode}.lua"
            with open(direct_lua, "w") as f:
                f.write(f'wrk.path = "/index.html"\n{header}')
            with open(proxy_lua, "w") as f:
                f.write(f'wrk.path = "http://{origin}/index.html"\nwrk.headers["Host"] = "{origin}"\n{header}')
            rows[(mode, "direct")] = wrk(args, f"http://{origin}", direct_lua, None)
            rows[(mode, "passthrough")] = wrk(args, f"http://127.0.0.1:{pt_port}", proxy_lua, pt.pid)
            rows[(mode, "robotsgate")] = wrk(args, f"http://127.0.0.1:{rg_port}", proxy_lua, rg.pid)
            rows[(mode, "rg+log")] = wrk(args, f"http://127.0.0.1:{log_port}", proxy_lua, rg_log.pid)
            if other:
                rows[(mode, "other")] = wrk(args, f"http://127.0.0.1:{other_port}", proxy_lua, other.pid)

        print(f"\nwrk -t1 -c{args.connections} -d{args.seconds}s on 127.0.0.1, nginx origin, proxies with threads: 1\n")
        print(f"{'mode':<11} {'target':<12} {'rps':>10} {'p50 ms':>8} {'p99 ms':>8} {'CPU µs/req':>11} {'non-2xx':>8}")
        for (mode, target), r in rows.items():
            cpu = f"{r['cpu_us']:.1f}" if target != "direct" else "-"
            print(f"{mode:<11} {target:<12} {r['rps']:>10.0f} {r['p50']:>8.3f} {r['p99']:>8.3f} {cpu:>11} {r['non2xx']:>8}")
        print()
        for mode in ("keep-alive", "close"):
            ptr = rows[(mode, "passthrough")]
            for target, label in (("robotsgate", "log off"), ("rg+log", "log on ")):
                rgr = rows[(mode, target)]
                print(f"{mode:<11} robotsgate ({label})/passthrough: CPU per request {rgr['cpu_us'] / ptr['cpu_us']:.2f}x, "
                      f"rps {rgr['rps'] / ptr['rps']:.2f}x, p99 {rgr['p99'] / ptr['p99']:.2f}x")
            if other:
                otr = rows[(mode, "other")]
                print(f"{mode:<11} other/passthrough:      CPU per request {otr['cpu_us'] / ptr['cpu_us']:.2f}x, "
                      f"rps {otr['rps'] / ptr['rps']:.2f}x, p99 {otr['p99'] / ptr['p99']:.2f}x")
    finally:
        stop(started)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
