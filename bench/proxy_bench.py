#!/usr/bin/env python3
"""wrk through robotsgate vs a bare Pingora passthrough vs nginx direct, in one run.

Everything runs on 127.0.0.1: an nginx origin (a 1 KiB page + robots.txt), robotsgate and
examples/passthrough.rs (the same Pingora setup and upstream peer options, timeouts
included, but no robots/egress/DNS work), each with `threads: 1`. The proxies are pinned
to CPU 1, nginx and wrk to CPU 0, so a proxy's CPU time is its own. robotsgate runs
twice: access log off (`RUST_LOG=warn`) and on (`info`, written to a file, as the journal
would take it), and a third time judging usage preferences (`rg+usage`: two declared
purposes against the file's Content-Signal and Content-Usage rules, access log off),
compared with the first. The passthrough runs as bare Pingora does (glibc malloc) and, as a second
baseline, with jemalloc preloaded (robotsgate links jemalloc): the allocator alone is
worth a few microseconds per request.

For keep-alive and `Connection: close`, each round loads every proxy at once, one wrk
each, for the same seconds: this host's speed drifts by more than the differences
measured (10-20% between runs seconds apart), and proxies loaded together drift
together. The script prints each one's CPU time per request (utime+stime of the whole
process from /proc, all threads) as the median and range over the rounds, then the
ratios robotsgate / passthrough, each taken within a round and given as median and
range. `--sequential` loads one proxy at a time instead (each alone on CPU 1, back to
back, in an order rotated each round, each after one second of unmeasured load). Last, one connection at a time, also `--rounds` times: the p50 latency each proxy
adds to the round's direct request.

`--usage` measures the usage judgement's cost alone (`--signed`: signing every request as
a Web Bot Auth identity, `rg+signed`; `--evidence`: every decision recorded in
`evidence.dir`, `rg+evidence`, and beside it `rg+digest`, each body's SHA-256 recorded
too, `evidence.body_digest`): robotsgate, the feature's row and `rg-again` (a second
robotsgate with the first one's configuration: the A/A control, whose ratio to
robotsgate is this host's noise), loaded one at a time in an order rotated each round.
With `--evidence`, a last load of distinct URLs (a crawl's mix: each URL new, one in
five disallowed) through `rg+evidence` gives the octets a record takes on disk, raw and
gzip-compressed.

Usage: bench/proxy_bench.py [--seconds 6] [--connections 64] [--rounds 3]
                            [--compare OTHER_ROBOTSGATE_BINARY] [--sequential]
                            [--usage | --signed | --evidence | --versus]
                            [--profile dist]
With --compare, a second robotsgate (another build, e.g. the previous commit's) runs in the
same run as another row, "other" (access log on). `--versus` (with --compare) loads only
this build (`rg+log`), the other and `rg-again` (this build again: the A/A control), all
with the access log on, one at a time in an order rotated each round, and prints this
build's ratio to the other's. `--profile dist` measures this build as it ships (Cargo.toml's
`dist` profile: link-time optimisation, one code unit; built first, about 6.5 minutes
from scratch on 2 cores) instead of the release profile the tests run.
Needs wrk, nginx and libjemalloc2 (Debian packages `wrk`, `nginx-light`, `libjemalloc2`);
installs them if missing. Only processes this script started are stopped, by PID.
"""

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys

from benchlib import (POOL, ROOT, UNPACED, ms, cpu_seconds, prepare, free_port, page_origin,
                      robotsgate_binary, robotsgate_config, stop, wait_port)

JEMALLOC = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"


def pinned(cpu, command):
    return ["taskset", "-c", str(cpu), *command]


def wrk_start(args, url, lua, pid, connections=None, seconds=None):
    """Starts wrk (on CPU 0) against `url`, for `seconds` (default `--seconds`); `pid`'s
    CPU time is counted from now."""
    before = cpu_seconds(pid) if pid else 0.0
    proc = subprocess.Popen(
        pinned(0, ["wrk", "-t1", f"-c{connections or args.connections}", f"-d{seconds or args.seconds}s", "--latency",
                   "-s", lua, url]),
        stdout=subprocess.PIPE, text=True,
    )
    return proc, url, pid, before


def wrk_result(started):
    """Waits for a wrk of `wrk_start` and reads its result and the CPU time per request."""
    proc, url, pid, before = started
    out = proc.communicate()[0]
    cpu = (cpu_seconds(pid) - before) if pid else 0.0
    found = re.search(r"(\d+) requests in", out)
    if proc.returncode != 0 or not found:
        sys.exit(f"wrk against {url} printed no result:\n{out}")
    requests = int(found.group(1))
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return {
        "rps": float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)),
        "p50": ms(re.search(r"^\s+50%\s+(\S+)", out, re.M).group(1)),
        "p99": ms(re.search(r"^\s+99%\s+(\S+)", out, re.M).group(1)),
        "cpu_us": cpu / max(requests, 1) * 1e6,
        "non2xx": int(errors.group(1)) if errors else 0,
        "requests": requests,
    }


def wrk(args, url, lua, pid, connections=None):
    return wrk_result(wrk_start(args, url, lua, pid, connections))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=int, default=6)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--compare", help="another robotsgate binary, measured in the same run")
    parser.add_argument("--sequential", action="store_true",
                        help="load one proxy at a time instead of all of them at once")
    parser.add_argument("--usage", action="store_true",
                        help="only robotsgate, rg+usage and the A/A control rg-again, one at a time")
    parser.add_argument("--signed", action="store_true",
                        help="only robotsgate, rg+signed and the A/A control rg-again, one at a time")
    parser.add_argument("--evidence", action="store_true",
                        help="only robotsgate, rg+evidence and the A/A control rg-again, one at a time")
    parser.add_argument("--profile", default="release",
                        help="the Cargo profile of this build's robotsgate (dist: as it ships)")
    parser.add_argument("--versus", action="store_true",
                        help="with --compare: only rg+log, the other binary and the A/A control "
                             "rg-again (access log on for all three), one at a time")
    args = parser.parse_args()
    if args.versus and not args.compare:
        parser.error("--versus needs --compare")
    # --usage / --signed: one feature's cost against robotsgate without it, beside A/A;
    # --versus: this build against another, beside A/A.
    feature = ("rg+usage" if args.usage else "rg+signed" if args.signed
               else "rg+evidence" if args.evidence else None)
    if feature or args.versus:
        args.sequential = True
    if not os.path.exists(JEMALLOC):
        subprocess.run(["apt-get", "install", "-y", "-qq", "libjemalloc2"], check=True,
                       env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
    work = prepare("bench", {"wrk": "wrk", "nginx": "nginx-light", "taskset": "util-linux"}, ["passthrough"])
    rgbin = robotsgate_binary(args.profile)
    started = []
    try:
        origin = page_origin(work, started, pinned(0, []))

        # Pacing off: this measures the cost of a cached decision (benchlib.UNPACED).
        conf = robotsgate_config(work, "rg", "  admin_listen: null\n" + UNPACED, POOL)
        # The same, judging the usage preferences of two declared purposes per request.
        conf_usage = robotsgate_config(work, "rg-usage", "  admin_listen: null\n" + UNPACED +
                                       "  agent:\n    default_purposes: [search, train-ai]\n", POOL)
        # The same, signing every request as a Web Bot Auth identity (a key made now).
        key = f"{work}/main.jwk"
        subprocess.run([f"{ROOT}/target/release/robotsgate", "keys", "generate", "--out", key],
                       check=True, stdout=subprocess.DEVNULL)
        conf_signed = robotsgate_config(work, "rg-signed", "  admin_listen: null\n" + UNPACED +
                                        "  signing:\n    identities:\n      - name: main\n"
                                        f"        key_file: {key}\n"
                                        "        signature_agent: https://crawler.example\n"
                                        "  agent:\n    default_identity: main\n", POOL)
        # The same, recording every decision (the shipped settings: refuse on failure).
        conf_evidence = robotsgate_config(work, "rg-evidence", "  admin_listen: null\n" + UNPACED +
                                          f"  evidence:\n    dir: {work}/evidence\n", POOL)
        conf_digest = robotsgate_config(work, "rg-digest", "  admin_listen: null\n" + UNPACED +
                                        f"  evidence:\n    dir: {work}/evidence-digest\n"
                                        "    body_digest: true\n", POOL)
        proxies = {}  # name -> (process, port)

        def start(name, command, env):
            port = free_port()
            proc = subprocess.Popen(pinned(1, [*command(port)]), env={**os.environ, **env},
                                    stderr=open(f"{work}/{name}.log", "w"))
            started.append(proc)
            wait_port(port)
            proxies[name] = (proc, port)

        def robotsgate(binary, config=conf):
            return lambda port: [binary, "run", "--config", config, "--listen", f"127.0.0.1:{port}",
                                 "--allow-destination", "127.0.0.0/8", "--agent", "ExampleBot"]

        passthrough = lambda port: [f"{ROOT}/target/release/examples/passthrough", conf, f"127.0.0.1:{port}"]
        if not feature and not args.versus:
            start("passthrough", passthrough, {"RUST_LOG": "warn"})
            start("pt+jemalloc", passthrough, {"RUST_LOG": "warn", "LD_PRELOAD": JEMALLOC})
        # rg+usage right after robotsgate, the row it is compared with (with
        # --sequential, neighbours in a round run closest in time).
        if args.versus:
            start("rg+log", robotsgate(rgbin), {"RUST_LOG": "info"})
            start("rg-again", robotsgate(rgbin), {"RUST_LOG": "info"})
        else:
            start("robotsgate", robotsgate(rgbin), {"RUST_LOG": "warn"})
        if feature in (None, "rg+usage") and not args.versus:
            start("rg+usage", robotsgate(rgbin, conf_usage), {"RUST_LOG": "warn"})
        if feature in (None, "rg+signed") and not args.versus:
            start("rg+signed", robotsgate(rgbin, conf_signed), {"RUST_LOG": "warn"})
        if feature in (None, "rg+evidence") and not args.versus:
            start("rg+evidence", robotsgate(rgbin, conf_evidence), {"RUST_LOG": "warn"})
        if feature == "rg+evidence":
            start("rg+digest", robotsgate(rgbin, conf_digest), {"RUST_LOG": "warn"})
        if feature:
            start("rg-again", robotsgate(rgbin), {"RUST_LOG": "warn"})
        elif not args.versus:
            start("rg+log", robotsgate(rgbin), {"RUST_LOG": "info"})
        if args.compare:
            start("other", robotsgate(args.compare), {"RUST_LOG": "info"})
        # Warm robotsgate's robots.txt cache: "cached decisions" is what is measured.
        for name, (_, port) in proxies.items():
            subprocess.run(["curl", "-s", "-o", "/dev/null", "-x", f"http://127.0.0.1:{port}",
                            f"http://{origin}/index.html"], check=True)
        check = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", f"http://{origin}/index.html"],
                               capture_output=True, text=True).stdout
        if check != "200":
            sys.exit(f"nginx answers {check}, not 200: see {work}/nginx.err")

        lua = {}
        for mode in ("keep-alive", "close"):
            header = 'wrk.headers["Connection"] = "close"\n' if mode == "close" else ""
            lua[mode, "direct"] = f"{work}/direct-{mode}.lua"
            lua[mode, "proxy"] = f"{work}/proxy-{mode}.lua"
            with open(lua[mode, "direct"], "w") as f:
                f.write(f'wrk.path = "/index.html"\n{header}')
            with open(lua[mode, "proxy"], "w") as f:
                f.write(f'wrk.path = "http://{origin}/index.html"\nwrk.headers["Host"] = "{origin}"\n{header}')

        runs = {}  # (mode, name) -> [result per round]
        for mode in ("keep-alive", "close"):
            for round_ in range(args.rounds):
                runs.setdefault((mode, "direct"), []).append(wrk(args, f"http://{origin}", lua[mode, "direct"], None))
                load = lambda proc, port: wrk_start(args, f"http://127.0.0.1:{port}", lua[mode, "proxy"], proc.pid)

                def warmed(proc, port):
                    # One second unmeasured first: a proxy loaded right after another
                    # (or after the direct run) ran up to 30% dearer for its first seconds.
                    wrk_result(wrk_start(args, f"http://127.0.0.1:{port}", lua[mode, "proxy"], None, seconds=1))
                    return wrk_result(load(proc, port))
                if args.sequential:
                    # Rotated each round: no row always runs first, or right after another.
                    names = list(proxies)
                    names = names[round_ % len(names):] + names[:round_ % len(names)]
                    results = {name: warmed(*proxies[name]) for name in names}
                else:
                    started_now = {name: load(*proxy) for name, proxy in proxies.items()}
                    results = {name: wrk_result(w) for name, w in started_now.items()}
                for name, result in results.items():
                    runs.setdefault((mode, name), []).append(result)
        # One connection: the latency each proxy adds (to the direct request of its round).
        single = {}  # name -> [added p50 µs per round]
        for _ in range(args.rounds):
            direct = wrk(args, f"http://{origin}", lua["keep-alive", "direct"], None, connections=1)["p50"]
            for name, (proc, port) in proxies.items():
                r = wrk(args, f"http://127.0.0.1:{port}", lua["keep-alive", "proxy"], proc.pid, connections=1)
                single.setdefault(name, []).append((r["p50"] - direct) * 1000)

        # A round whose latency line wrk printed unreadably (NaN) does not void the others.
        med = lambda values: statistics.median([v for v in values if v == v] or [float("nan")])
        together = "one at a time" if args.sequential else "all at once, sharing CPU 1 (rps and latency are each one's share)"
        print(f"\nwrk -t1 -c{args.connections} -d{args.seconds}s x {args.rounds} rounds on 127.0.0.1, nginx origin, "
              f"proxies with threads: 1 on CPU 1 (nginx, wrk on CPU 0), loaded {together}; "
              f"median [min-max] over rounds\n")
        print(f"{'mode':<11} {'target':<12} {'rps':>10} {'p50 ms':>8} {'p99 ms':>8} {'CPU µs/req':>22} {'non-2xx':>8}")
        for (mode, name), rs in runs.items():
            cpus = [r["cpu_us"] for r in rs]
            cpu = f"{med(cpus):.1f} [{min(cpus):.1f}-{max(cpus):.1f}]" if name != "direct" else "-"
            print(f"{mode:<11} {name:<12} {med([r['rps'] for r in rs]):>10.0f} {med([r['p50'] for r in rs]):>8.3f} "
                  f"{med([r['p99'] for r in rs]):>8.3f} {cpu:>22} {sum(r['non2xx'] for r in rs):>8}")
        print()
        # Ratios within each round (the proxies of a round ran together), then their
        # median and range: this host's speed drifts between rounds by more than the
        # differences measured.
        def ratios(values, baseline):
            rs = [v / b for v, b in zip(values, baseline) if v == v and b == b and b > 0]
            return f"{med(rs):.2f}x [{min(rs):.2f}-{max(rs):.2f}]" if rs else "n/a"

        cpus = lambda mode, name: [r["cpu_us"] for r in runs[mode, name]]
        if "passthrough" in proxies:
            print("CPU per request, the ratio of each round, median [min-max]:")
            for mode in ("keep-alive", "close"):
                for name in [n for n in proxies if n not in ("passthrough", "pt+jemalloc")]:
                    print(f"{mode:<11} {name:<11} {ratios(cpus(mode, name), cpus(mode, 'passthrough'))} the passthrough, "
                          f"{ratios(cpus(mode, name), cpus(mode, 'pt+jemalloc'))} the passthrough on jemalloc")
        if not args.versus:
            print("\nusage preferences judged (two purposes), every request signed, every decision recorded, "
                  "against the same robotsgate without, CPU per request, the ratio of each round, median [min-max]:")
        for mode in ("keep-alive", "close") if not args.versus else ():
            for name in ("rg+usage", "rg+signed", "rg+evidence", "rg+digest"):
                if name in proxies:
                    print(f"{mode:<11} {name:<11} {ratios(cpus(mode, name), cpus(mode, 'robotsgate'))} robotsgate")
            if "rg-again" in proxies:
                print(f"{mode:<11} rg-again    {ratios(cpus(mode, 'rg-again'), cpus(mode, 'robotsgate'))} robotsgate "
                      f"(the same configuration twice: this host's noise)")
        if args.versus:
            print("\nthis build against the other (--compare), access log on for both, CPU per request, "
                  "the ratio of each round, median [min-max]:")
            for mode in ("keep-alive", "close"):
                for name in ("rg+log", "rg-again", "other"):
                    print(f"{mode:<11} {name:<11} each round: " + ", ".join(f"{c:.1f}" for c in cpus(mode, name)))
                print(f"{mode:<11} rg+log      {ratios(cpus(mode, 'rg+log'), cpus(mode, 'other'))} other")
                print(f"{mode:<11} rg-again    {ratios(cpus(mode, 'rg-again'), cpus(mode, 'rg+log'))} rg+log "
                      f"(the same configuration twice: this host's noise)")
        print("\none connection, keep-alive, p50 added to the direct request of the round, median [min-max]:")
        for name, added in single.items():
            print(f"  {name:<12} +{med(added):.0f} µs [{min(added):.0f}-{max(added):.0f}] "
                  f"({ratios(added, single[next(iter(proxies))])} the {next(iter(proxies))}'s)")
        if "rg+evidence" in proxies:
            record_sizes(args, work, origin, proxies["rg+evidence"])
    finally:
        stop(started)
        shutil.rmtree(work, ignore_errors=True)


def record_sizes(args, work, origin, proxy):
    """A crawl's mix through rg+evidence (each URL new, one in five disallowed by the
    origin's robots.txt, `--seconds` of it), then the octets a record takes on disk."""
    import glob
    import gzip
    proc, port = proxy
    segments = lambda: sorted(glob.glob(f"{work}/evidence/chains/*/*[0-9].jsonl"))
    before = sum(os.path.getsize(s) for s in segments())
    lua = f"{work}/mixed.lua"
    with open(lua, "w") as f:
        f.write(f'''counter = 0
request = function()
  counter = counter + 1
  local path = (counter % 5 == 0) and "/api/v1/news/" or "/page/"
  return wrk.format("GET", "http://{origin}" .. path .. counter .. "?q=" .. math.random(1000000))
end
wrk.headers["Host"] = "{origin}"
''')
    wrk(args, f"http://127.0.0.1:{port}", lua, proc.pid)
    data = b"".join(open(s, "rb").read() for s in segments())[before:]
    lines = [l for l in data.split(b"\n") if l]
    kinds = {}
    for line in lines:
        kind = line.split(b'"type":"', 1)[-1].split(b'"', 1)[0].decode()
        kinds[kind] = kinds.get(kind, 0) + 1
    packed = len(gzip.compress(data, 6))
    print(f"\nrecords of a crawl's mix (each URL new, one in five disallowed): {len(lines)} records {kinds}, "
          f"{len(data) / max(1, len(lines)):.0f} octets a record on disk, "
          f"{packed / max(1, len(lines)):.0f} gzip-compressed (level 6)")


if __name__ == "__main__":
    main()
