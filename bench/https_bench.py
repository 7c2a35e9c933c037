#!/usr/bin/env python3
"""HTTPS through robotsgate (CONNECT + interception) vs HTTPS straight to the origin, in one run.

Everything runs on 127.0.0.1: an nginx HTTPS origin (certificate from a CA made here),
robotsgate with an operator CA (`robotsgate ca init`) and `threads: 1`, and the load
client examples/https_load.rs (wrk cannot CONNECT). It measures:

1. Handshake cost, sequentially, no TLS resumption:
   - TLS straight to nginx (the baseline a crawler pays without robotsgate);
   - CONNECT + TLS through robotsgate, the same host every time (leaf from the cache);
   - CONNECT + TLS through robotsgate, a new IP literal every time (leaf minted now).
2. Keep-alive load: `--connections` connections, each set up once, then back-to-back
   GETs for `--seconds`: direct vs through robotsgate (decisions cached: the robots.txt
   is fetched during a warm-up; pacing off, as in proxy_bench.py, so the figure is the
   cost of a request, not of queueing 32 connections behind two turns: benchlib.UNPACED). Prints
   requests/s, p50/p99 and robotsgate's CPU time per request (utime+stime of the whole
   process, from /proc). The same client also runs plain HTTP through robotsgate (absolute
   form, nginx's plain port), so what TLS adds is a ratio measured in the same run.
   `--rounds` rounds, the kinds interleaved; each row is the median [min-max] over them.
   Proxies run on CPU 1, nginx and the client on CPU 0. HTTPS through robotsgate, plain
   HTTP through a second, identical robotsgate, and Squid are loaded at once in each
   round, so their ratios are taken under the same conditions (this host's speed drifts
   by 10-20% between runs seconds apart); direct, CONNECT alone and transparent run
   one at a time.
3. Transparent TLS: the same handshakes and load with no proxy at all, the client's
   connections to 127.0.0.2:443 redirected by iptables to robotsgate's transparent TLS
   listener (robotsgate's own marked with `transparent.upstream_mark`, so not redirected).
4. Squid 5.7 with ssl-bump (Debian `squid-openssl`, one process, no cache, no access
   log), minting leaves from the same operator CA: the same CONNECT + TLS handshakes and
   keep-alive load, its CPU per request beside robotsgate's.
5. The floor: the bare Pingora passthrough (examples/passthrough.rs) with a TLS listener
   (`--tls`, Pingora's own rustls listener, a certificate from the operator CA) and TLS
   to the origin, against a second identical passthrough in plain HTTP, loaded with the
   robotsgate pair. Their ratio is what two TLS legs cost a Pingora proxy that does
   nothing else; robotsgate HTTPS / passthrough TLS is robotsgate's own cost on the
   HTTPS path, as proxy_bench.py's ratio is on the plain one.

The whole run happens in a network namespace the script makes (`ip netns`; root), so the
redirection rule touches nothing outside it.
6. With `--h2`: HTTP/2 rows instead (bench/h2_bench.py): h2 clients (32 streams on 4
   connections) against HTTP/1.1 keep-alive clients, and h2 against HTTP/1.1 to the same
   nginx, each proxy loaded alone on its core, order rotated each round.

Usage: bench/https_bench.py [--seconds 5] [--connections 32] [--handshakes 300] [--rounds 3]
       bench/https_bench.py --h2 [--seconds 4] [--connections 32] [--h2-connections 4] [--rounds 5]
Needs nginx (Debian `nginx-light`), openssl, iproute2, iptables and squid
(`squid-openssl`); installs what is missing.
Only processes this script started are stopped, by PID.
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys

from benchlib import (CLIENT_CPU, POOL, PROXY_CPU, ROOT, UNPACED, ensure_packages, prepare, free_port,
                      leaf_certificate, nginx_binary, robotsgate_config, run_load, spread, start_load, load_result,
                      stop, wait_port)

PASSTHROUGH = f"{ROOT}/target/release/examples/passthrough"

def start_squid(work, port):
    """Squid with ssl-bump on 127.0.0.1:`port`, leaves minted from the operator CA, the
    origin's CA trusted upstream; foreground (`-N`), one process, nothing cached or logged."""
    shutil.copy(f"{work}/operator-ca.key", f"{work}/squid-ca.key")
    os.chmod(f"{work}/squid-ca.key", 0o644)  # squid drops to the `proxy` user
    db = f"{work}/ssl_db"
    subprocess.run(["/usr/lib/squid/security_file_certgen", "-c", "-s", db, "-M", "16MB"], check=True,
                   capture_output=True)
    shutil.chown(db, "proxy", "proxy")
    for root, dirs, files in os.walk(db):
        for name in dirs + files:
            shutil.chown(os.path.join(root, name), "proxy", "proxy")
    with open(f"{work}/squid.conf", "w") as f:
        f.write(f"""http_port 127.0.0.1:{port} ssl-bump generate-host-certificates=on dynamic_cert_mem_cache_size=16MB tls-cert={work}/operator-ca.pem tls-key={work}/squid-ca.key
sslcrtd_program /usr/lib/squid/security_file_certgen -s {db} -M 16MB
sslcrtd_children 4
ssl_bump bump all
tls_outgoing_options cafile={work}/origin-ca.pem
http_access allow all
cache deny all
access_log none
cache_log {work}/squid.log
pid_filename {work}/squid.pid
coredump_dir {work}
shutdown_lifetime 0 seconds
""")
    return subprocess.Popen([*PROXY_CPU, "squid", "-N", "-f", f"{work}/squid.conf"], stderr=open(f"{work}/squid.err", "w"))


def in_own_netns():
    """Runs this script again inside a fresh network namespace, then deletes it."""
    ns = f"rgbench{os.getpid()}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        subprocess.run(["ip", "-n", ns, "link", "set", "lo", "up"], check=True)
        env = {**os.environ, "RG_BENCH_NETNS": ns}
        code = subprocess.run(["ip", "netns", "exec", ns, sys.executable, *sys.argv], env=env).returncode
    finally:
        subprocess.run(["ip", "netns", "del", ns])
    sys.exit(code)


def main():
    if "--h2" in sys.argv:
        # bench/h2_bench.py is its own script: run it in this process's place.
        rest = [a for a in sys.argv[1:] if a != "--h2"]
        os.execv(sys.executable, [sys.executable, f"{ROOT}/bench/h2_bench.py", *rest])
    if "RG_BENCH_NETNS" not in os.environ:
        ensure_packages({"nginx": "nginx-light", "openssl": "openssl", "ip": "iproute2", "iptables": "iptables",
                         "squid": "squid-openssl"})
        in_own_netns()
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--handshakes", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    work = prepare("https-bench", {"nginx": "nginx-light", "openssl": "openssl", "squid": "squid-openssl"},
                   ["https_load", "passthrough"])
    rgbin = f"{ROOT}/target/release/robotsgate"
    started = []
    try:
        # Origin CA and nginx's certificate (IP SAN: the load client addresses 127.0.0.1).
        subprocess.run([rgbin, "ca", "init", "--cert", f"{work}/origin-ca.pem", "--key", f"{work}/origin-ca.key",
                        "--name", "bench origin CA"], check=True, capture_output=True)
        leaf_certificate(work, "origin", "origin-ca")
        os.chmod(f"{work}/origin.key", 0o644)  # nginx workers run unprivileged
        subprocess.run([rgbin, "ca", "init", "--cert", f"{work}/operator-ca.pem", "--key", f"{work}/operator-ca.key"],
                       check=True, capture_output=True)
        # The passthrough's TLS listener: from the operator CA, which the load client trusts.
        leaf_certificate(work, "pt", "operator-ca")

        nginx_port, plain_port, rg_port, tls_port = free_port(), free_port(), free_port(), free_port()
        os.makedirs(f"{work}/www")
        with open(f"{work}/www/page", "w") as f:
            f.write("<html><body>" + "x" * 512 + "</body></html>\n")
        with open(f"{work}/www/robots.txt", "w") as f:
            f.write("User-agent: *\nDisallow: /private\n")
        with open(f"{work}/nginx.conf", "w") as f:
            f.write(f"""daemon off; worker_processes 1; pid {work}/nginx.pid; error_log {work}/nginx.err;
events {{ worker_connections 4096; }}
http {{ access_log off; keepalive_requests 1000000; ssl_session_tickets off; ssl_session_cache off;
  server {{ listen 127.0.0.1:{nginx_port} ssl; listen 127.0.0.2:443 ssl; listen 127.0.0.1:{plain_port};
           root {work}/www;
           ssl_certificate {work}/origin.pem; ssl_certificate_key {work}/origin.key; }} }}
""")
        nginx = subprocess.Popen([*CLIENT_CPU, nginx_binary(), "-c", f"{work}/nginx.conf", "-p", work])
        started.append(nginx)
        wait_port(nginx_port)

        def start_proxy(name, command, ports):
            """Starts `command` on the proxies' CPU, its log in {name}.log, once it listens
            on every port of `ports`."""
            proc = subprocess.Popen([*PROXY_CPU, *command], env={**os.environ, "RUST_LOG": "warn"},
                                    stderr=open(f"{work}/{name}.log", "w"))
            started.append(proc)
            for port in ports:
                wait_port(port)
            return proc

        def robotsgate(name, port, tls):
            """robotsgate on `port` with its transparent TLS listener on `tls`; its config,
            pid file and log are {name}.*."""
            config = robotsgate_config(work, name, "  admin_listen: null\n  transparent:\n    upstream_mark: 42\n"
                                       + UNPACED, POOL)
            return start_proxy(name, [rgbin, "run", "--config", config, "--listen", f"127.0.0.1:{port}",
                                      "--transparent-tls", f"127.0.0.1:{tls}", "--allow-destination", "127.0.0.0/8",
                                      "--ca-cert", f"{work}/operator-ca.pem", "--ca-key", f"{work}/operator-ca.key",
                                      "--upstream-ca", f"{work}/origin-ca.pem"], [port, tls])

        rg = robotsgate("rg", rg_port, tls_port)
        # A second, identical robotsgate for the plain-HTTP load, which runs at the same
        # time as the HTTPS one (this host's speed drifts between runs seconds apart).
        # Its transparent listener gets no traffic; it is there so both send the same `Via`.
        rg_plain_port = free_port()
        rg_plain = robotsgate("rg-plain", rg_plain_port, free_port())

        def passthrough(name):
            """A bare Pingora passthrough with a plain and a TLS listener: their ports."""
            config = robotsgate_config(work, name, "", POOL + f"ca_file: {work}/origin-ca.pem\n")
            port, tls = free_port(), free_port()
            proc = start_proxy(name, [PASSTHROUGH, config, f"127.0.0.1:{port}", "--tls", f"127.0.0.1:{tls}",
                                      f"{work}/pt.pem", f"{work}/pt.key"], [port, tls])
            return proc, port, tls

        # Two, for the same reason as the two robotsgates: one loaded in TLS, one in plain.
        pt_tls, _, pt_tls_port = passthrough("pt-tls")
        pt_plain, pt_plain_port, _ = passthrough("pt-plain")
        squid_port = free_port()
        squid = start_squid(work, squid_port)
        started.append(squid)
        wait_port(squid_port)
        subprocess.run(["iptables", "-t", "nat", "-A", "OUTPUT", "-p", "tcp", "-d", "127.0.0.2", "--dport", "443",
                        "-m", "mark", "!", "--mark", "42", "-j", "REDIRECT", "--to-ports", str(tls_port)], check=True)

        target = f"127.0.0.1:{nginx_port}"
        direct = ["--target", target, "--ca", f"{work}/origin-ca.pem"]
        proxied = ["--target", target, "--ca", f"{work}/operator-ca.pem", "--proxy", f"127.0.0.1:{rg_port}"]
        plain = ["--target", f"127.0.0.1:{plain_port}", "--ca", f"{work}/operator-ca.pem",
                 "--proxy", f"127.0.0.1:{rg_plain_port}", "--plain"]
        transparent = ["--target", "127.0.0.2:443", "--ca", f"{work}/operator-ca.pem"]
        floor_tls = ["--target", target, "--ca", f"{work}/operator-ca.pem", "--gateway", f"127.0.0.1:{pt_tls_port}"]
        floor_plain = ["--target", f"127.0.0.1:{plain_port}", "--ca", f"{work}/operator-ca.pem",
                       "--proxy", f"127.0.0.1:{pt_plain_port}", "--plain"]
        # By name: Squid 5.7 mints a leaf for an IP literal with the address as a DNS name,
        # which a verifying client rejects.
        bumped = ["--target", target, "--name", "localhost", "--ca", f"{work}/operator-ca.pem",
                  "--proxy", f"127.0.0.1:{squid_port}"]
        # Warm-up: robots.txt fetched, leaf for 127.0.0.1 minted, upstream pool filled.
        run_load([*proxied, "--connections", "2", "--seconds", "0.5", "--path", "/page"])
        run_load([*bumped, "--connections", "2", "--seconds", "0.5", "--path", "/page"])
        run_load([*transparent, "--connections", "2", "--seconds", "0.5", "--path", "/page"])
        run_load([*plain, "--connections", "2", "--seconds", "0.5", "--path", "/page"])
        run_load([*floor_tls, "--connections", "2", "--seconds", "0.5", "--path", "/page"])
        run_load([*floor_plain, "--connections", "2", "--seconds", "0.5", "--path", "/page"])

        n = str(args.handshakes)
        hs_direct = run_load([*direct, "--handshakes", n])
        # A discarded series first (the first series after another load runs slow here,
        # whichever kind it is), then the two kinds alternated twice, the better of each kept.
        run_load([*proxied, "--handshakes", n], rg.pid)
        runs = [run_load([*proxied, "--handshakes", n, *extra], rg.pid)
                for _ in range(2) for extra in ([], ["--distinct"])]
        print("handshake runs (cached, minted, cached, minted) p50 ms:", [r["p50_ms"] for r in runs])
        hs_cached = min(runs[0::2], key=lambda r: r["p50_ms"])
        hs_fresh = min(runs[1::2], key=lambda r: r["p50_ms"])
        hs_transparent = run_load([*transparent, "--handshakes", n], rg.pid)
        hs_squid = run_load([*bumped, "--handshakes", n], squid.pid)

        load = ["--connections", str(args.connections), "--seconds", str(args.seconds), "--path", "/page"]
        # Each round: the kinds of `together` at once (the proxies share CPU 1, so the
        # ratios between them do not move with the host's drift), then the others alone.
        together = {"robotsgate": (proxied, rg.pid), "plain HTTP": (plain, rg_plain.pid),
                    "squid-bump": (bumped, squid.pid), "pt TLS": (floor_tls, pt_tls.pid),
                    "pt plain": (floor_plain, pt_plain.pid)}
        alone = {"direct": (direct, None), "CONNECT alone": (proxied, rg.pid), "transparent": (transparent, rg.pid)}
        rounds = {name: [] for name in [*alone, *together]}
        for _ in range(args.rounds):
            for name, (target_args, pid) in alone.items():
                rounds[name].append(run_load([*target_args, *load], pid))
            loads = {name: start_load([*target_args, *load], pid) for name, (target_args, pid) in together.items()}
            for name, started_load in loads.items():
                rounds[name].append(load_result(started_load))
        for name, results in rounds.items():
            if any(r["errors"] for r in results):
                log = {"squid-bump": "squid.log", "plain HTTP": "rg-plain.log", "pt TLS": "pt-tls.log",
                       "pt plain": "pt-plain.log"}.get(name, "rg.log")
                print(f"errors: {name} {[r['errors'] for r in results]} (see {work}/{log})")

        print(f"\nConnection setup, {n} sequential, no TLS resumption (ms):")
        print(f"{'':<44} {'p50':>8} {'p90':>8} {'mean':>8} {'CPU µs':>8}")
        for name, r in (("TLS direct to nginx", hs_direct),
                        ("CONNECT + TLS via robotsgate, cached leaf", hs_cached),
                        ("CONNECT + TLS via robotsgate, minted leaf", hs_fresh),
                        ("transparent TLS via robotsgate, cached leaf", hs_transparent),
                        ("CONNECT + TLS via Squid ssl-bump, cached", hs_squid)):
            cpu = f"{r['cpu_s'] / r['count'] * 1e6:.0f}" if "cpu_s" in r else "-"
            print(f"{name:<44} {r['p50_ms']:>8.3f} {r['p90_ms']:>8.3f} {r['mean_ms']:>8.3f} {cpu:>8}")
        print(f"minting adds {hs_fresh['p50_ms'] - hs_cached['p50_ms']:.3f} ms at the median "
              f"({hs_fresh['p50_ms'] / hs_cached['p50_ms']:.2f}x the cached handshake)")

        cpu = lambda r: r["cpu_s"] / max(r["requests"], 1) * 1e6

        print(f"\nKeep-alive load, {args.connections} connections, {args.seconds:g} s x {args.rounds} rounds, "
              f"robotsgate threads: 1; median [min-max] over rounds:")
        print(f"{'target':<12} {'rps':>10} {'p50 ms':>8} {'p99 ms':>8} {'CPU µs/req':>24}")
        for name, results in rounds.items():
            med = lambda key: statistics.median(r[key] for r in results)
            cpus = f"{spread([cpu(r) for r in results])}" if "cpu_s" in results[0] else "-"
            print(f"{name:<12} {med('rps'):>10.0f} {med('p50_ms'):>8.3f} {med('p99_ms'):>8.3f} {cpus:>24}")
        # Ratios within each round: kinds measured minutes apart would compare the machine.
        ratio = lambda a, b, key=cpu: spread([key(x) / key(y) for x, y in zip(rounds[a], rounds[b])], "x")
        print(f"robotsgate HTTPS / robotsgate plain HTTP: CPU per request {ratio('robotsgate', 'plain HTTP')}")
        print(f"the floor, passthrough TLS / passthrough plain HTTP: CPU per request {ratio('pt TLS', 'pt plain')}")
        print(f"robotsgate HTTPS / passthrough TLS: CPU per request {ratio('robotsgate', 'pt TLS')} "
              f"(plain HTTP: {ratio('plain HTTP', 'pt plain')})")
        print(f"robotsgate / Squid ssl-bump: CPU per request {ratio('robotsgate', 'squid-bump')}, "
              f"rps {ratio('robotsgate', 'squid-bump', lambda r: r['rps'])}")
        print(f"transparent TLS / CONNECT interception (each alone): CPU per request "
              f"{ratio('transparent', 'CONNECT alone')}, "
              f"handshake p50 {hs_transparent['p50_ms'] / hs_cached['p50_ms']:.2f}x")
        print(f"robotsgate / direct: p50 {ratio('robotsgate', 'direct', lambda r: r['p50_ms'])}")
    finally:
        stop(started)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
