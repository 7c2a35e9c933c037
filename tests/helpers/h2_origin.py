#!/usr/bin/env python3
"""An HTTPS origin that speaks only HTTP/2 (hyper-h2) and refuses streams on purpose.

Every request is logged as a JSON line to --log when it arrives and again when the
origin is done with it (answered, reset, or cut by a GOAWAY), with wall-clock times in
seconds:
    {"path": "/x", "stream": 1, "arrived": 1700000000.123, "ended": 1700000000.423, "how": "refused"}

Paths:
- /robots.txt: 200 with --robots.
- /refuse/...: after --after seconds, RST_STREAM(REFUSED_STREAM).
- /goaway/...: after --after seconds, GOAWAY whose last stream id is below this stream
  (the origin says it never processed it), then the connection closes.
- anything else: 200 "page <path>".

Listens on 127.0.0.1:--port (TLS with --cert/--key, ALPN h2 only); one thread per
connection; runs until killed.
"""
import argparse
import json
import socket
import ssl
import threading
import time

import h2.config
import h2.connection
import h2.errors
import h2.events

LOG_LOCK = threading.Lock()


def log(path, record):
    with LOG_LOCK, open(path, "a") as f:
        f.write(json.dumps(record) + "\n")


def send(sock, conn):
    data = conn.data_to_send()
    if data:
        sock.sendall(data)


def respond(conn, stream, status, body):
    conn.send_headers(
        stream,
        [(":status", str(status)), ("content-type", "text/plain"),
         ("content-length", str(len(body)))],
    )
    conn.send_data(stream, body, end_stream=True)


def serve(sock, args):
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
    conn.initiate_connection()
    send(sock, conn)
    while True:
        try:
            data = sock.recv(65536)
        except OSError:
            return
        if not data:
            return
        try:
            events = conn.receive_data(data)
        except Exception:
            return
        for event in events:
            if not isinstance(event, h2.events.RequestReceived):
                continue
            headers = {k.decode() if isinstance(k, bytes) else k:
                       v.decode() if isinstance(v, bytes) else v for k, v in event.headers}
            path = headers.get(":path", "")
            record = {"path": path, "stream": event.stream_id, "arrived": time.time()}
            if path == "/robots.txt":
                respond(conn, event.stream_id, 200, args.robots.encode())
                how = "answered"
            elif path.startswith("/refuse/"):
                time.sleep(args.after)
                conn.reset_stream(event.stream_id, h2.errors.ErrorCodes.REFUSED_STREAM)
                how = "refused"
            elif path.startswith("/goaway/"):
                time.sleep(args.after)
                conn.close_connection(
                    error_code=h2.errors.ErrorCodes.NO_ERROR,
                    last_stream_id=max(0, event.stream_id - 2),
                )
                record.update(ended=time.time(), how="goaway")
                log(args.log, record)
                send(sock, conn)
                sock.close()
                return
            else:
                respond(conn, event.stream_id, 200, f"page {path}\n".encode())
                how = "answered"
            send(sock, conn)
            record.update(ended=time.time(), how=how)
            log(args.log, record)
        send(sock, conn)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--cert", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--robots", default="User-agent: *\nAllow: /\n")
    parser.add_argument("--after", type=float, default=0.3)
    parser.add_argument("--log", required=True)
    args = parser.parse_args()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(args.cert, args.key)
    context.set_alpn_protocols(["h2"])
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", args.port))
    listener.listen(64)
    while True:
        raw, _ = listener.accept()
        try:
            tls = context.wrap_socket(raw, server_side=True)
        except (ssl.SSLError, OSError):
            raw.close()
            continue
        threading.Thread(target=serve, args=(tls, args), daemon=True).start()


if __name__ == "__main__":
    main()
