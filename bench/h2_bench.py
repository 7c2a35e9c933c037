#!/usr/bin/env python3
"""HTTP/2 on each leg against HTTP/1.1, through robotsgate (`bench/https_bench.py --h2`).

One nginx HTTPS origin on 127.0.0.1 that offers h2 (`listen … ssl http2`), and three
robotsgates with `threads: 1`: `rg-h1` (`upstream.http2: off`), `rg-h2` (`auto`: its
requests to nginx are streams of one h2 connection) and `rg-h1-again` (`rg-h1`'s
configuration twice: the A/A control, whose ratio to the baseline is this host's noise).
The load client (examples/https_load.rs) opens CONNECT tunnels and sends back-to-back
GETs for `--seconds`, either HTTP/1.1 keep-alive (`--connections` tunnels, one request
at a time each) or h2 (`--h2-connections` tunnels carrying `--connections` streams in
all). Five loads, each proxy loaded alone on CPU 1 (nginx and the client on CPU 0), in
an order rotated each round:

  h1/h1       rg-h1, HTTP/1.1 clients           (the baseline)
  h2/h1       rg-h1, h2 clients                 (downstream h2)
  h1/h2       rg-h2, HTTP/1.1 clients           (upstream h2)
  h2/h2       rg-h2, h2 clients                 (both legs)
  h1/h1 again rg-h1-again, HTTP/1.1 clients     (A/A control)

Pacing off (benchlib.UNPACED): the figure is what a request costs, not its queueing.
Prints each load's CPU per request (utime+stime from /proc) and requests/s as the median
[min-max] over rounds, then the ratios to the baseline taken within each round.

Usage: bench/h2_bench.py [--seconds 4] [--connections 32] [--h2-connections 4] [--rounds 5]
Needs nginx (Debian `nginx-light`) and openssl; installs what is missing.
Only processes this script started are stopped, by PID.
"""

import argparse
import os
import shutil
import subprocess

from benchlib import (CLIENT_CPU, POOL, PROXY_CPU, ROOT, UNPACED, run_load, prepare, free_port, leaf_certificate, nginx_binary, robotsgate_config,
                      spread, stop, wait_port)



def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=4)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--h2-connections", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    work = prepare("h2-bench", {"nginx": "nginx-light", "openssl": "openssl"}, ["https_load"])
    rgbin = f"{ROOT}/target/release/robotsgate"
    started = []
    try:
        for ca in ("origin-ca", "operator-ca"):
            subprocess.run([rgbin, "ca", "init", "--cert", f"{work}/{ca}.pem", "--key", f"{work}/{ca}.key"],
                           check=True, capture_output=True)
        leaf_certificate(work, "origin", "origin-ca")
        os.chmod(f"{work}/origin.key", 0o644)  # nginx workers run unprivileged
        os.makedirs(f"{work}/www")
        with open(f"{work}/www/page", "w") as f:
            f.write("<html><body>" + "x" * 512 + "</body></html>\n")
        with open(f"{work}/www/robots.txt", "w") as f:
            f.write("User-agent: *\nDisallow: /private\n")
        nginx_port = free_port()
        with open(f"{work}/nginx.conf", "w") as f:
            f.write(f"""daemon off; worker_processes 1; pid {work}/nginx.pid; error_log {work}/nginx.err;
events {{ worker_connections 4096; }}
http {{ log_format proto '$server_protocol'; access_log {work}/access.log proto buffer=64k;
  keepalive_requests 1000000;
  server {{ listen 127.0.0.1:{nginx_port} ssl http2; root {work}/www;
           ssl_certificate {work}/origin.pem; ssl_certificate_key {work}/origin.key; }} }}
""")
        nginx = subprocess.Popen([*CLIENT_CPU, nginx_binary(), "-c", f"{work}/nginx.conf", "-p", work])
        started.append(nginx)
        wait_port(nginx_port)

        def robotsgate(name, http2):
            port = free_port()
            config = robotsgate_config(work, name, f"  admin_listen: null\n  upstream:\n    http2: {http2}\n"
                                       + UNPACED, POOL)
            proc = subprocess.Popen([*PROXY_CPU, rgbin, "run", "--config", config, "--listen", f"127.0.0.1:{port}",
                                     "--allow-destination", "127.0.0.0/8", "--ca-cert", f"{work}/operator-ca.pem",
                                     "--ca-key", f"{work}/operator-ca.key", "--upstream-ca", f"{work}/origin-ca.pem"],
                                    env={**os.environ, "RUST_LOG": "warn"}, stderr=open(f"{work}/{name}.log", "w"))
            started.append(proc)
            wait_port(port)
            return proc, port

        proxies = {"rg-h1": robotsgate("rg-h1", "off"), "rg-h2": robotsgate("rg-h2", "auto"),
                   "rg-h1-again": robotsgate("rg-h1-again", "off")}

        def target(port):
            return ["--target", f"127.0.0.1:{nginx_port}", "--ca", f"{work}/operator-ca.pem",
                    "--proxy", f"127.0.0.1:{port}"]

        for _, port in proxies.values():  # robots.txt fetched, leaf minted, pools filled
            run_load([*target(port), "--connections", "2", "--seconds", "0.5", "--path", "/page"])
        common = ["--seconds", str(args.seconds), "--path", "/page"]
        h1_clients = ["--connections", str(args.connections), *common]
        streams = max(1, args.connections // args.h2_connections)
        h2_clients = ["--connections", str(args.h2_connections), "--h2", "--streams", str(streams), *common]
        loads = {"h1/h1": ("rg-h1", h1_clients), "h2/h1": ("rg-h1", h2_clients),
                 "h1/h2": ("rg-h2", h1_clients), "h2/h2": ("rg-h2", h2_clients),
                 "h1/h1 again": ("rg-h1-again", h1_clients)}
        names = list(loads)
        results = {name: [] for name in names}
        for round_number in range(args.rounds):
            order = names[round_number % len(names):] + names[:round_number % len(names)]
            for name in order:
                proxy, clients = loads[name]
                proc, port = proxies[proxy]
                results[name].append(run_load([*target(port), *clients], proc.pid))
        for name, rounds in results.items():
            errors = [r["errors"] for r in rounds]
            if any(errors):
                print(f"errors: {name} {errors} (see {work}/{loads[name][0]}.log)")

        def cpu_us(r):
            return r["cpu_s"] / max(1, r["requests"]) * 1e6

        print(f"\nHTTP/1.1 clients: {args.connections} CONNECT tunnels; h2 clients: {args.h2_connections} tunnels x "
              f"{streams} streams; keep-alive GETs, {args.seconds:g} s x {args.rounds} rounds, each proxy alone on "
              "CPU 1; median [min-max] over rounds\n")
        print(f"{'client/origin':<14} {'proxy':<12} {'req/s':>22} {'CPU µs/req':>24}")
        for name in names:
            print(f"{name:<14} {loads[name][0]:<12} {spread([r['rps'] for r in results[name]]):>22} "
                  f"{spread([cpu_us(r) for r in results[name]]):>24}")
        stop([nginx])  # flushes its log: what protocol each request arrived in
        started.remove(nginx)
        with open(f"{work}/access.log") as f:
            protocols = [line.strip() for line in f]
        print(f"\nnginx saw {protocols.count('HTTP/2.0')} requests over HTTP/2.0 and "
              f"{protocols.count('HTTP/1.1')} over HTTP/1.1")
        print("\nCPU per request, ratio to h1/h1 within each round, median [min-max]:")
        for name in names[1:]:
            ratios = [cpu_us(a) / cpu_us(b) for a, b in zip(results[name], results["h1/h1"])]
            print(f"  {name:<12} {spread(ratios, 'x')}")
    finally:
        stop(started)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
