#!/usr/bin/env python3
"""A loopback origin that verifies Web Bot Auth signatures with an implementation of
RFC 9421 robotsgate does not use (PyPI `http-message-signatures`). Every request is
logged as one JSON line: its path, whether the signature verified (and why not), and the
signature headers it arrived with.

Usage: verifying_origin.py [ADDRESS:]PORT DIRECTORY LOG [CERT.pem KEY.pem]
DIRECTORY is where the keys come from: `http://HOST:PORT`, a key directory listener,
asked as a verifier asks (GET /.well-known/http-message-signatures-directory with the
`Host` the request's Signature-Agent names, the media type checked) for every request;
or a JWKS file, read for every request. ADDRESS defaults to 127.0.0.1.
With a certificate and key it serves HTTPS. With PRICE set in the environment
(`USD 0.01`) it is a pay-per-crawl origin as Cloudflare documents one: a verified request
whose signature covers a `crawler-max-price` at or above the price gets 200 and
`crawler-charged: <price>`; any other gets 402 and `crawler-price: <price>`.
Answers 200 `verified` or 401 `invalid: <reason>`; /robots.txt is `User-agent: *`
(allow all) when verified.
"""

import base64
import datetime
import decimal
import http.server
import json
import os
import sys
import threading

import requests
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from http_message_signatures import HTTPMessageVerifier, HTTPSignatureKeyResolver, algorithms

ADDRESS, _, PORT = sys.argv[1].rpartition(":")
ADDRESS, PORT = ADDRESS or "127.0.0.1", int(PORT)
DIRECTORY, LOG = sys.argv[2], sys.argv[3]
PRICE = os.environ.get("PRICE")


def amount(price):
    currency, _, value = (price or "").partition(" ")
    try:
        return currency, decimal.Decimal(value)
    except decimal.InvalidOperation:
        return currency, None


def signature_agent_host(value):
    """The host of the URL a Signature-Agent names, in either form: `"https://h"` or
    `sig1="https://h"`."""
    url = value.partition("=")[2] if not value.startswith('"') else value
    return url.strip().strip('"').partition("://")[2].partition("/")[0]


class Directory(HTTPSignatureKeyResolver, threading.local):
    """Keys by RFC 7638 thumbprint (`kid`), from the listener or file each time; `agent`
    is the Signature-Agent of the request this thread verifies."""

    agent = ""

    def keys(self):
        if not DIRECTORY.startswith("http://"):
            with open(DIRECTORY) as f:
                return json.load(f)["keys"]
        session = requests.Session()
        session.trust_env = False  # straight to the listener, whatever the environment says
        answer = session.get(DIRECTORY + "/.well-known/http-message-signatures-directory",
                             headers={"Host": signature_agent_host(self.agent)}, timeout=5)
        kind = answer.headers.get("Content-Type", "")
        if answer.status_code != 200 or kind != "application/http-message-signatures-directory+json":
            raise ValueError(f"directory answered {answer.status_code} {kind!r}")
        return answer.json()["keys"]

    def resolve_public_key(self, key_id):
        for jwk in self.keys():
            if jwk.get("kid") == key_id and jwk.get("crv") == "Ed25519":
                x = base64.urlsafe_b64decode(jwk["x"] + "=" * (-len(jwk["x"]) % 4))
                return Ed25519PublicKey.from_public_bytes(x)
        return None


DIRECTORY_KEYS = Directory()
VERIFIER = HTTPMessageVerifier(signature_algorithm=algorithms.ED25519, key_resolver=DIRECTORY_KEYS)
# Same host, same clock: no skew allowed, so an expired signature is refused the second
# it expires.
VERIFIER.max_clock_skew = datetime.timedelta(0)


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        headers = {k: v for k, v in self.headers.items()}
        message = requests.Request("GET", f"http://{self.headers.get('Host', '')}{self.path}",
                                   headers=headers).prepare()
        DIRECTORY_KEYS.agent = self.headers.get("Signature-Agent", "")
        try:
            results = VERIFIER.verify(message, expect_tag="web-bot-auth",
                                      require_components=["@authority"])
            # Web Bot Auth's policy: Signature-Agent covered too, whole (the string
            # form) or the member it names (the draft's `;key=`).
            agent = [c for r in results for c in r.covered_components
                     if str(c).startswith('"signature-agent"')]
            ok = len(results) == 1 and len(agent) == 1
            why = f"{len(results)} signatures, Signature-Agent covered as {agent}"
            price_covered = any(str(c) == '"crawler-max-price"'
                                for r in results for c in r.covered_components)
        except Exception as e:  # the verdict is the log line
            ok, why, price_covered = False, f"{type(e).__name__}: {e}", False
        offered = self.headers.get("crawler-max-price")
        pays = False
        if PRICE and ok and self.path != "/robots.txt":
            (cur, max_amount), (want_cur, want) = amount(offered), amount(PRICE)
            pays = price_covered and cur == want_cur and max_amount is not None and max_amount >= want
        line = {"path": self.path, "verified": ok, "why": why, "offered": offered,
                "price_covered": price_covered, "paid": pays,
                "signature": self.headers.get_all("Signature") or [],
                "signature_input": self.headers.get_all("Signature-Input") or [],
                "signature_agent": self.headers.get_all("Signature-Agent") or []}
        with open(LOG, "a") as f:
            f.write(json.dumps(line) + "\n")
        body = (b"User-agent: *\nAllow: /\n" if self.path == "/robots.txt" else b"verified") if ok \
            else f"invalid: {why}".encode()
        status = 200 if ok else 401
        if PRICE and ok and self.path != "/robots.txt" and not pays:
            status, body = 402, b"payment required"
        self.send_response(status)
        if PRICE and status == 402:
            self.send_header("crawler-price", PRICE)
        if pays:
            self.send_header("crawler-charged", PRICE)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


# A listen backlog for a burst of concurrent requests (socketserver's default is 5).
http.server.ThreadingHTTPServer.request_queue_size = 128
server = http.server.ThreadingHTTPServer((ADDRESS, PORT), Handler)
if len(sys.argv) > 5:
    import ssl
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(sys.argv[4], sys.argv[5])
    server.socket = context.wrap_socket(server.socket, server_side=True)
server.serve_forever()
