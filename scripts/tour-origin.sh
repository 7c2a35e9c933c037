#!/usr/bin/env bash
# The README tour's origin, on 127.0.0.1:PORT (default 18000) until interrupted: a
# robots.txt that disallows /private and asks for Crawl-delay: 1, a page, a private page.
# One Python process, nothing written to disk, no network needed.
set -euo pipefail
port=${1:-18000}
echo "tour origin on http://127.0.0.1:$port/ (robots.txt: Disallow /private, Crawl-delay 1)" >&2
exec python3 -c '
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PAGES = {
    "/robots.txt": b"User-agent: *\nDisallow: /private\nCrawl-delay: 1\n",
    "/page": b"hello\n",
    "/private/page": b"secret\n",
}

class Origin(BaseHTTPRequestHandler):
    def do_GET(self):
        body = PAGES.get(self.path)
        self.send_response(200 if body else 404)
        body = body or b"not found\n"
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Origin).serve_forever()
' "$port"
