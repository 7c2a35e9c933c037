#!/usr/bin/env python3
"""A crawl with Debian's `requests`, for the transparent tests' unprivileged crawler.

The kernel redirects this process's ports 80 and 443 to robotsgate, so the session
takes no proxy from the environment. Prints one line per request: the status and the
`X-Robots-Decision` header.

Usage: crawl_requests.py CAFILE URL...
"""
import sys

import requests


def main() -> int:
    cafile, urls = sys.argv[1], sys.argv[2:]
    session = requests.Session()
    session.trust_env = False  # no proxy from the environment: the kernel redirects
    for url in urls:
        r = session.get(url, verify=cafile, timeout=20)
        print(r.status_code, r.headers.get("X-Robots-Decision", ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
