#!/usr/bin/env python3
"""Checks that this interpreter can import every module the tests' Python needs.

Run before the suite (scripts/test.sh) with the `python3` the tests run, and with
Debian's /usr/bin/python3 for the unprivileged crawler of the transparent tests
(`--crawler`). Exits 1 naming the interpreter and each missing module.
"""
import importlib
import sys

# Module → the package that provides it (tests/helpers/requirements.txt).
SUITE = {
    "requests": "requests",
    "h2": "h2",
    "cryptography": "cryptography",
    "http_message_signatures": "http-message-signatures",
}
# The crawler uid (65534) cannot read a pyenv or venv under /root: it runs Debian's
# python3 with Debian's requests (python3-requests).
CRAWLER = {"requests": "python3-requests"}


def main() -> int:
    wanted = CRAWLER if "--crawler" in sys.argv[1:] else SUITE
    missing = []
    for module, package in wanted.items():
        try:
            importlib.import_module(module)
        except Exception as e:  # an ImportError, or a broken install
            missing.append(f"{module} (install {package}: {type(e).__name__}: {e})")
    if missing:
        print(f"{sys.executable} cannot import: " + "; ".join(missing), file=sys.stderr)
        print("run scripts/deps.sh with this python3 first on PATH", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
