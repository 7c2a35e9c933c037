#!/usr/bin/env python3
"""Soak: minutes of mixed load through robotsgate, watching its memory and descriptors.

Starts 60 origins on 127.0.0.1 (asyncio, in their own process) of seven kinds:
  normal   robots.txt disallows /private/
  paced    Crawl-delay: 0.2
  r500     robots.txt answers 500 (unreachable: 503 for everything)
  rslow    robots.txt trickles one octet every 0.5 s (fetch times out)
  storm    pages answer 503 (robotsgate backs off)
  hang     pages are accepted and never answered (504 after the read timeout)
  reset    pages are reset mid-body
then robotsgate (release build) with more origins than robots.max_origins (so the store
evicts and refetches) and short TTLs (so robots.txt is refetched throughout). Workers
send keep-alive requests through the proxy to random origins and paths (a fifth of
them disallowed), and a few hostile clients send garbage and stall. Every 10 s the
script samples robotsgate's RSS and open file descriptors and prints them; at the end it
prints the trend, requests served and answers/errors by kind.

Usage: bench/soak.py [--seconds 600] [--workers 48]
Exits 1 if robotsgate dies, or if RSS or descriptors keep growing over the last half.
"""

import argparse
import asyncio
import collections
import logging
import multiprocessing
import os
import random
import subprocess
import sys
import tempfile
import time

from benchlib import ROOT, free_port, stop, wait_port

KINDS = ["normal"] * 24 + ["paced"] * 12 + ["r500"] * 4 + ["rslow"] * 4 + ["storm"] * 6 + ["hang"] * 4 + ["reset"] * 6


async def origin_handler(kind, reader, writer):
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            path = head.split(b" ", 2)[1].decode(errors="replace")
            if path == "/robots.txt":
                if kind == "r500":
                    body, status = b"oops\n", 500
                elif kind == "rslow":
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 200\r\n\r\n")
                    for _ in range(200):
                        await asyncio.sleep(0.5)
                        writer.write(b"#")
                    continue
                elif kind == "paced":
                    body, status = b"User-agent: *\nCrawl-delay: 0.2\nDisallow: /private/\n", 200
                else:
                    body, status = b"User-agent: *\nDisallow: /private/\n", 200
                headers = b"Cache-Control: max-age=30\r\n"
            elif kind == "storm":
                body, status, headers = b"busy\n", 503, b""
            elif kind == "hang":
                await asyncio.sleep(3600)
                return
            elif kind == "reset":
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n" + b"x" * 1000)
                await writer.drain()
                writer.transport.abort()
                return
            else:
                body, status, headers = b"page " + path.encode() + b"\n" * 200, 200, b""
            writer.write(b"HTTP/1.1 %d X\r\nContent-Length: %d\r\n%s\r\n%s" % (status, len(body), headers, body))
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
        pass
    finally:
        writer.close()


def serve_origins(ports_out, stop_event):
    logging.getLogger("asyncio").setLevel(logging.ERROR)

    async def run():
        servers = []
        for kind in KINDS:
            server = await asyncio.start_server(
                lambda r, w, k=kind: origin_handler(k, r, w), "127.0.0.1", 0)
            servers.append(server)
        ports_out.extend([s.sockets[0].getsockname()[1] for s in servers])
        while not stop_event.is_set():
            await asyncio.sleep(0.2)
        os._exit(0)  # origins that hang on purpose are not waited for

    asyncio.run(run())


async def read_response(reader):
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    length = 0
    close = False
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            length = int(value.strip())
        elif name == b"connection" and value.strip().lower() == b"close":
            close = True
    await reader.readexactly(length)
    return status, close


class Tally:
    def __init__(self):
        self.answers = collections.Counter()
        self.errors = collections.Counter()
        self.total = 0


async def worker(proxy_port, origins, tally, deadline, rng):
    reader = writer = None
    while time.monotonic() < deadline:
        kind, port = rng.choice(origins)
        path = f"/private/{rng.randrange(10**6)}" if rng.random() < 0.2 else f"/page/{rng.randrange(10**6)}"
        request = f"GET http://127.0.0.1:{port}{path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUser-Agent: SoakBot/1.0\r\n\r\n"
        try:
            if writer is None:
                reader, writer = await asyncio.open_connection("127.0.0.1", proxy_port)
            writer.write(request.encode())
            status, close = await asyncio.wait_for(read_response(reader), 15)
            tally.answers[(kind, status)] += 1
            if close:
                writer.close()
                writer = None
        except asyncio.TimeoutError:
            tally.errors[(kind, "client-timeout")] += 1
            writer.close()
            writer = None
        except (asyncio.IncompleteReadError, ConnectionError, ValueError) as e:
            tally.errors[(kind, type(e).__name__)] += 1
            if writer is not None:
                writer.close()
            writer = None
        tally.total += 1


async def hostile(proxy_port, tally, deadline, rng):
    """Garbage, oversized heads and stalled connections, now and then."""
    while time.monotonic() < deadline:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", proxy_port)
            choice = rng.choice(["garbage", "huge-line", "stall"])
            if choice == "garbage":
                writer.write(bytes(rng.randrange(256) for _ in range(200)) + b"\r\n\r\n")
            elif choice == "huge-line":
                writer.write(b"GET http://127.0.0.1/" + b"a" * 100000 + b" HTTP/1.1\r\n\r\n")
            else:
                writer.write(b"GET http://127.0.0.1/ HTTP/1.1\r\nX-Slow: ")  # and stall
            data = await asyncio.wait_for(reader.read(), 20)
            writer.close()
            tally.answers[("hostile", f"{choice}: {data[:12].decode(errors='replace')!r}")] += 1
        except (asyncio.TimeoutError, ConnectionError):
            tally.errors[("hostile", "no-answer")] += 1
        await asyncio.sleep(0.5)


def sample(pid):
    with open(f"/proc/{pid}/status") as f:
        rss = next(int(l.split()[1]) for l in f if l.startswith("VmRSS:")) / 1024
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    return rss, fds


async def drive(args, proxy, origins):
    tally = Tally()
    rng = random.Random(7)
    start = time.monotonic()
    deadline = start + args.seconds
    tasks = [asyncio.create_task(worker(proxy["port"], origins, tally, deadline, random.Random(rng.random())))
             for _ in range(args.workers)]
    tasks += [asyncio.create_task(hostile(proxy["port"], tally, deadline, random.Random(i))) for i in range(4)]
    samples = []
    print(f"{'t (s)':>6} {'RSS MiB':>8} {'fds':>5} {'requests':>9} {'req/s':>7}")
    last_total, last_t = 0, start
    while time.monotonic() < deadline:
        await asyncio.sleep(min(10, max(0.1, deadline - time.monotonic())))
        if proxy["proc"].poll() is not None:
            sys.exit("robotsgate exited during the soak")
        now = time.monotonic()
        rss, fds = sample(proxy["proc"].pid)
        rate = (tally.total - last_total) / (now - last_t)
        last_total, last_t = tally.total, now
        samples.append((now - start, rss, fds))
        print(f"{now - start:6.0f} {rss:8.1f} {fds:5d} {tally.total:9d} {rate:7.0f}", flush=True)
    await asyncio.gather(*tasks, return_exceptions=True)
    return tally, samples


def main():
    logging.getLogger("asyncio").setLevel(logging.ERROR)
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=600)
    parser.add_argument("--workers", type=int, default=48)
    args = parser.parse_args()
    subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=ROOT, check=True)

    manager = multiprocessing.Manager()
    ports = manager.list()
    stop_event = multiprocessing.Event()
    origin_proc = multiprocessing.Process(target=serve_origins, args=(ports, stop_event))
    origin_proc.start()
    while len(ports) < len(KINDS):
        time.sleep(0.05)
    origins = list(zip(KINDS, ports))

    work = tempfile.mkdtemp(prefix="robotsgate-soak-")
    port, admin = free_port(), free_port()
    config = os.path.join(work, "robotsgate.yaml")
    with open(config, "w") as f:
        f.write(f"""version: 1
threads: 2
pid_file: {work}/pid
upgrade_sock: {work}/upgrade.sock
robotsgate:
  listen: 127.0.0.1:{port}
  admin_listen: 127.0.0.1:{admin}
  egress:
    allow_destinations: [127.0.0.0/8]
  robots:
    max_origins: 40
    fetch_timeout_seconds: 2
    min_ttl_seconds: 10
    retry_initial_seconds: 2
    retry_max_seconds: 20
  upstream:
    read_timeout_seconds: 2
  pacing:
    max_wait_seconds: 2
    max_queue: 32
  limits:
    header_read_timeout_seconds: 5
""")
    log = open(os.path.join(work, "robotsgate.log"), "w")
    proc = subprocess.Popen([os.path.join(ROOT, "target/release/robotsgate"), "run", "--config", config],
                            stdout=subprocess.DEVNULL, stderr=log)
    try:
        wait_port(port)
        wait_port(admin)
        tally, samples = asyncio.run(drive(args, {"port": port, "proc": proc}, origins))
    finally:
        stop([proc])
        stop_event.set()
        origin_proc.join(5)
        if origin_proc.is_alive():
            origin_proc.kill()

    print(f"\nrequests: {tally.total} in {args.seconds:.0f} s ({tally.total / args.seconds:.0f}/s)")
    print("answers by origin kind and status:")
    for (kind, status), n in sorted(tally.answers.items(), key=lambda kv: str(kv[0])):
        print(f"  {kind:<8} {status!s:>4}  {n}")
    print("errors by kind:", dict(tally.errors) or "none")
    first, last = samples[0], samples[-1]
    print(f"RSS: {first[1]:.1f} MiB at {first[0]:.0f} s -> {last[1]:.1f} MiB at {last[0]:.0f} s "
          f"(max {max(s[1] for s in samples):.1f}); fds: {first[2]} -> {last[2]} (max {max(s[2] for s in samples)})")
    half = samples[len(samples) // 2:]
    rss_growth = half[-1][1] - half[0][1]
    fd_growth = half[-1][2] - half[0][2]
    print(f"second half: RSS {rss_growth:+.1f} MiB, fds {fd_growth:+d}")
    if rss_growth > 0.25 * half[0][1] or fd_growth > 100:
        sys.exit("still growing over the second half")


if __name__ == "__main__":
    main()
