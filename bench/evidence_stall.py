#!/usr/bin/env python3
"""Memory of robotsgate while the disk under `evidence.dir` stalls.

The evidence directory is an ext4 filesystem on a loop device made for the run; after
`--before` seconds of load (wrk, 64 connections, each URL new: a crawl's mix), the
filesystem is frozen (`fsfreeze -f`: every write to it blocks, as a stalled disk's
would) for `--stall` seconds, then thawed, and the load goes on for `--after` seconds.
Meanwhile robotsgate's resident memory is read every 0.2 s, and a probe request is sent
every second with a 2 s limit (its status, or `none` when nothing came back in time).
Printed: the resident memory at most before, during and after the stall,
`evidence.max_pending_bytes`, the probes' answers per phase, and what the origin
received against the records written (every request the origin received has its
record, `verify` on the directory once thawed).

Usage: bench/evidence_stall.py [--threads 2] [--before 5] [--stall 15] [--after 5]
                               [--max-pending 8388608]
Needs root (a loop device, mount, fsfreeze), wrk and nginx (installed if missing). Only
processes this script started are stopped, by PID; the filesystem is thawed and
unmounted on the way out.
"""

import argparse
import glob
import json
import os
import subprocess
import sys
import threading
import time
import urllib.request

from benchlib import ROOT, prepare, free_port, page_origin, stop, wait_port


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def probe(port, origin, n):
    """One request through the proxy: its status, or None after 2 s."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": f"http://127.0.0.1:{port}"}))
    try:
        with opener.open(f"http://{origin}/index.html?probe={n}", timeout=2) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return None


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--before", type=int, default=5)
    parser.add_argument("--stall", type=int, default=15)
    parser.add_argument("--after", type=int, default=5)
    parser.add_argument("--max-pending", type=int, default=8 * 1024 * 1024)
    args = parser.parse_args()
    work = prepare("evidence-stall", {"wrk": "wrk", "nginx": "nginx-light", "fsfreeze": "util-linux"})
    started, loop, disk = [], None, f"{work}/disk"
    frozen = False
    try:
        subprocess.run(["truncate", "-s", "256M", f"{work}/disk.img"], check=True)
        loop = subprocess.run(["losetup", "-f", "--show", f"{work}/disk.img"], check=True,
                              capture_output=True, text=True).stdout.strip()
        subprocess.run(["mkfs.ext4", "-q", loop], check=True)
        os.makedirs(disk)
        subprocess.run(["mount", loop, disk], check=True)
        origin = page_origin(work, started)
        port = free_port()
        conf = f"{work}/rg.yaml"
        with open(conf, "w") as f:
            f.write(f"version: 1\nthreads: {args.threads}\npid_file: {work}/rg.pid\n"
                    f"upgrade_sock: {work}/rg.sock\ngrace_period_seconds: 0\n"
                    "graceful_shutdown_timeout_seconds: 1\nupstream_keepalive_pool_size: 1024\n"
                    "robotsgate:\n  admin_listen: null\n"
                    "  pacing:\n    max_in_flight: 0\n    adaptive:\n      enabled: false\n"
                    f"  evidence:\n    dir: {disk}/evidence\n    max_pending_bytes: {args.max_pending}\n")
        rg = subprocess.Popen([f"{ROOT}/target/release/robotsgate", "run", "--config", conf,
                               "--listen", f"127.0.0.1:{port}", "--allow-destination", "127.0.0.0/8",
                               "--agent", "ExampleBot"], stderr=open(f"{work}/rg.log", "w"))
        started.append(rg)
        wait_port(port)
        lua = f"{work}/mixed.lua"
        with open(lua, "w") as f:
            f.write(f'''counter = 0
request = function()
  counter = counter + 1
  local path = (counter % 5 == 0) and "/api/v1/news/" or "/index.html?page="
  return wrk.format("GET", "http://{origin}" .. path .. counter)
end
wrk.headers["Host"] = "{origin}"
''')
        total = args.before + args.stall + args.after
        load = subprocess.Popen(["wrk", "-t1", "-c64", f"-d{total}s", "--timeout", f"{total}s",
                                 "-s", lua, f"http://127.0.0.1:{port}"], stdout=subprocess.PIPE, text=True)
        phases = {"before": [], "stalled": [], "after": []}
        answers = {"before": [], "stalled": [], "after": []}
        phase = ["before"]
        done = threading.Event()

        def sample():
            while not done.is_set():
                phases[phase[0]].append(rss_kib(rg.pid))
                time.sleep(0.2)

        def probes():
            n = 0
            while not done.is_set():
                n += 1
                at = phase[0]
                answers[at].append(probe(port, origin, n))
                time.sleep(1.0)

        for t in (threading.Thread(target=sample), threading.Thread(target=probes)):
            t.daemon = True
            t.start()
        time.sleep(args.before)
        subprocess.run(["fsfreeze", "-f", disk], check=True)
        frozen = True
        phase[0] = "stalled"
        time.sleep(args.stall)
        subprocess.run(["fsfreeze", "-u", disk], check=True)
        frozen = False
        phase[0] = "after"
        out = load.communicate()[0]
        done.set()
        requests = int(out.split(" requests in")[0].split()[-1]) if " requests in" in out else -1
        non2xx = out.split("Non-2xx or 3xx responses:")[1].split()[0] if "Non-2xx" in out else "0"
        print(f"robotsgate threads: {args.threads}, evidence.max_pending_bytes: {args.max_pending} "
              f"({args.max_pending // 1024} KiB); wrk: {requests} requests, {non2xx} not 2xx/3xx")
        for name in ("before", "stalled", "after"):
            kib = phases[name]
            counts = {}
            for a in answers[name]:
                counts[str(a)] = counts.get(str(a), 0) + 1
            print(f"  {name:<8} RSS at most {max(kib) / 1024:.1f} MiB (first {kib[0] / 1024:.1f}, "
                  f"last {kib[-1] / 1024:.1f}; {len(kib)} samples); probes: {counts}")
        stop([rg])
        started.remove(rg)
        records = 0
        for segment in glob.glob(f"{disk}/evidence/chains/*/*[0-9].jsonl"):
            with open(segment, "rb") as f:
                records += sum(1 for line in f if b'"type":"decision"' in line)
        verify = subprocess.run([f"{ROOT}/target/release/robotsgate", "evidence", "verify",
                                 f"{disk}/evidence"], capture_output=True, text=True)
        print(f"  decision records: {records}; verify exit {verify.returncode}: "
              f"{(verify.stdout + verify.stderr).strip().splitlines()[-1:]}")
    finally:
        if frozen:
            subprocess.run(["fsfreeze", "-u", disk])
        stop(started)
        if loop:
            subprocess.run(["umount", disk], stderr=subprocess.DEVNULL)
            subprocess.run(["losetup", "-d", loop])
        subprocess.run(["rm", "-rf", work])


if __name__ == "__main__":
    main()
