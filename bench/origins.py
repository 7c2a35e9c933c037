"""Loopback origins for the load scripts: each on its own port, answering robots.txt
(with its Crawl-delay and a disallowed prefix) and pages, and logging when each request
arrived and when its response was handed to the kernel.

Run them in a process of their own (`serve_origins`), so the load generator's work does
not delay their timestamps.
"""

import asyncio
import time


class Origin:
    def __init__(self, delay, response_s, disallow=""):
        self.delay = delay
        self.response_s = response_s
        self.disallow = disallow
        self.log = []  # (path, arrived, done)

    async def handle(self, reader, writer):
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                arrived = time.monotonic()
                path = head.split(b" ", 2)[1].decode()
                if path == "/robots.txt":
                    body = f"User-agent: *\nDisallow: {self.disallow}\n"
                    if self.delay:
                        body += f"Crawl-delay: {self.delay}\n"
                    body = body.encode()
                else:
                    body = f"page {path}\n".encode()
                    if self.response_s:
                        await asyncio.sleep(self.response_s)
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
                # write() hands the bytes to the kernel at once when it can: that is the
                # response's end as the origin knows it (drain() returns later, after the
                # event loop gets round to it, which would overstate the end).
                done = time.monotonic()
                self.log.append((path, arrived, done))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            # Closed by the client, or cancelled when the origins stop.
            pass
        finally:
            writer.close()


def serve_origins(count, delays, response_s, ports_out, logs_out, stop, disallow=""):
    """Runs `count` origins (the i-th with `delays[i % len(delays)]`), puts their
    (port, delay) on `ports_out`, and their (port, delay, log) on `logs_out` once `stop`
    is set."""

    async def run():
        origins, servers = [], []
        for i in range(count):
            origin = Origin(delays[i % len(delays)], response_s, disallow)
            server = await asyncio.start_server(origin.handle, "127.0.0.1", 0)
            origin.port = server.sockets[0].getsockname()[1]
            origins.append(origin)
            servers.append(server)
        ports_out.put([(o.port, o.delay) for o in origins])
        while not stop.is_set():
            await asyncio.sleep(0.05)
        logs_out.put([(o.port, o.delay, o.log) for o in origins])
        for server in servers:
            server.close()

    asyncio.run(run())



def most_at_once(log):
    """The most requests one origin was serving at any moment (robots.txt excluded)."""
    events = sorted([(a, 1) for p, a, d in log if p != "/robots.txt"] + [(d, -1) for p, a, d in log if p != "/robots.txt"])
    now = most = 0
    for _, step in events:
        now += step
        most = max(most, now)
    return most
