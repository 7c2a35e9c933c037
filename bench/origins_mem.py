#!/usr/bin/env python3
"""Resident memory per held origin: robotsgate made to hold N distinct origins.

One nginx listens on 0.0.0.0, so every loopback address 127.a.b.c is an origin of its
own, each serving a five-line robots.txt (two Disallow, an Allow, a Sitemap) and a small
page. Two runs, each with a fresh robotsgate: every origin serving *distinct* octets (the
Sitemap names the origin's own address, so nothing can be shared: the cost of an origin
in general), then every origin serving the *same* octets (shared as one parsed file, as
the subdomains of a hosting platform or a CMS's default file are). robotsgate
(`threads: 1`, `robots.max_origins` above N) is asked for one page on each of
`--origins` addresses, by `--connections` keep-alive clients; each new origin costs it a
robots.txt fetch, a parse, a store entry and its pacing schedules.

It prints RSS after a warm-up of 1,000 origins and after N more, the difference per
origin (everything robotsgate keeps for an origin, allocator slack included), the
projection to 1,000,000 origins, and, separately, the upstream connections robotsgate
still holds open (Pingora's pools, bounded by their sizes, not per origin).

Usage: bench/origins_mem.py [--origins 100000] [--connections 16] [--only distinct|same]
Needs nginx (Debian `nginx-light`); installs it if missing. Only processes this script
started are stopped, by PID.
"""

import argparse
import asyncio
import os
import shutil
import subprocess
import time
import urllib.request

from benchlib import ROOT, prepare, free_port, nginx_binary, robotsgate_config, stop, wait_port

ROBOTS = "User-agent: *\nDisallow: /private/\nDisallow: /tmp/\nAllow: /private/open\nSitemap: http://{host}/sitemap.xml\n"


def address(i):
    """The i-th origin address: 127.1.0.1, 127.1.0.2, … (never 127.0.0.1)."""
    i += 1
    return f"127.{1 + (i >> 16)}.{(i >> 8) & 255}.{i & 255}"


def rss_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def held_origins(admin_port):
    text = urllib.request.urlopen(f"http://127.0.0.1:{admin_port}/metrics", timeout=10).read().decode()
    for line in text.splitlines():
        if line.startswith("robotsgate_robots_store_origins "):
            return int(float(line.split()[1]))
    return -1


def upstream_connections(pid, port):
    """TCP connections robotsgate holds to the origin port (its upstream pools)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    count = 0
    with open(f"/proc/{pid}/net/tcp") as f:
        for line in f.readlines()[1:]:
            fields = line.split()
            remote_port = int(fields[2].split(":")[1], 16)
            if remote_port == port and fields[3] == "01" and fields[9] in inodes:
                count += 1
    return count


async def drive(proxy_port, origin_port, first, count, connections):
    """GETs one page from each of `count` origins starting at index `first`."""
    queue = asyncio.Queue()
    for i in range(first, first + count):
        queue.put_nowait(address(i))
    failures = 0

    async def client():
        nonlocal failures
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy_port)
        while not queue.empty():
            host = queue.get_nowait()
            writer.write(f"GET http://{host}:{origin_port}/page HTTP/1.1\r\nHost: {host}:{origin_port}\r\n"
                         f"User-Agent: MemBot/1.0\r\n\r\n".encode())
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head.split(b" ", 2)[1])
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            await reader.readexactly(length)
            if status != 200:
                failures += 1
            if b"connection: close" in head.lower():
                writer.close()
                reader, writer = await asyncio.open_connection("127.0.0.1", proxy_port)
        writer.close()

    await asyncio.gather(*(client() for _ in range(connections)))
    return failures


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--origins", type=int, default=100_000)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--only", choices=["distinct", "same"])
    args = parser.parse_args()
    work = prepare("origins-mem", {"nginx": "nginx-light"})
    started = []
    try:
        distinct_port, same_port = free_port(), free_port()
        os.makedirs(f"{work}/www")
        with open(f"{work}/www/robots.txt", "w") as f:
            f.write(ROBOTS.format(host="example.com"))
        with open(f"{work}/www/page", "w") as f:
            f.write("<html><body>" + "x" * 256 + "</body></html>\n")
        with open(f"{work}/nginx.conf", "w") as f:
            f.write(f"""daemon off; worker_processes 1; pid {work}/nginx.pid; error_log {work}/nginx.err;
events {{ worker_connections 8192; }}
http {{ access_log off; keepalive_requests 1000000; default_type text/plain;
  server {{ listen 0.0.0.0:{same_port} reuseport; root {work}/www; }}
  server {{ listen 0.0.0.0:{distinct_port} reuseport; root {work}/www;
           location = /robots.txt {{ return 200 "{ROBOTS.format(host="$host")}"; }} }} }}
""")
        nginx = subprocess.Popen([nginx_binary(), "-c", f"{work}/nginx.conf", "-p", work])
        started.append(nginx)
        wait_port(same_port)
        wait_port(distinct_port)
        for files, port in (("distinct", distinct_port), ("same", same_port)):
            if args.only in (None, files):
                measure(args, work, files, port, started)
    finally:
        stop(started)
        shutil.rmtree(work, ignore_errors=True)


def measure(args, work, files, origin_port, started):
    """One fresh robotsgate made to hold warm-up + `--origins` origins on `origin_port`."""
    proxy_port, admin_port = free_port(), free_port()
    config = robotsgate_config(work, f"rg-{files}", f"  admin_listen: 127.0.0.1:{admin_port}\n"
                                                    f"  robots:\n    max_origins: {args.origins + 10_000}\n")
    rg = subprocess.Popen([f"{ROOT}/target/release/robotsgate", "run", "--config", config,
                           "--listen", f"127.0.0.1:{proxy_port}", "--allow-destination", "127.0.0.0/8"],
                          env={**os.environ, "RUST_LOG": "warn"}, stderr=open(f"{work}/rg-{files}.log", "w"))
    started.append(rg)
    wait_port(proxy_port)

    warm = 1_000
    failures = asyncio.run(drive(proxy_port, origin_port, 0, warm, args.connections))
    time.sleep(1)
    before = rss_bytes(rg.pid)
    start = time.time()
    failures += asyncio.run(drive(proxy_port, origin_port, warm, args.origins, args.connections))
    elapsed = time.time() - start
    time.sleep(1)
    after = rss_bytes(rg.pid)
    held = held_origins(admin_port)
    pooled = upstream_connections(rg.pid, origin_port)
    stop([rg])
    started.remove(rg)

    per_origin = (after - before) / args.origins
    print(f"\n{files} robots.txt files: origins asked for: {warm} warm-up + {args.origins} in {elapsed:.1f} s "
          f"({args.origins / elapsed:.0f}/s), failures: {failures}")
    print(f"origins held (robotsgate_robots_store_origins): {held}")
    print(f"RSS after warm-up: {before / 2**20:.1f} MiB; after: {after / 2**20:.1f} MiB")
    print(f"RSS per held origin: {per_origin:.0f} bytes ({per_origin / 1024:.2f} KiB)")
    print(f"projected for 1,000,000 origins: {per_origin * 1e6 / 2**30:.2f} GiB "
          f"(+ {before / 2**20:.0f} MiB base)")
    print(f"upstream connections held open (pools, not per origin): {pooled}")


if __name__ == "__main__":
    main()
