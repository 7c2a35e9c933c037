#!/usr/bin/env python3
"""Writes docs/cli.md, the command-line reference, from the binary's own help (clap):
every command and subcommand, its usage, arguments and flags, as `--help` prints them.

Run it after changing a command or a flag:
    python3 scripts/cli_reference.py target/release/robotsgate
`--check` writes nothing and fails when the reference differs from what it would write
(the test `docs::the_cli_reference_is_what_the_binary_says` runs it)."""

import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "docs", "cli.md")

HEAD = """# Command-line reference

Every command `robotsgate` takes, as its own `--help` prints it (this page is generated
from the binary by `scripts/cli_reference.py`, and a test fails when it differs). What to
run first: [install.md](install.md); the configuration's keys:
[configuration.md](configuration.md).
"""


def help_of(binary, path):
    out = subprocess.run([binary, *path, "--help"], capture_output=True, text=True, check=True)
    return out.stdout.rstrip() + "\n"


def subcommands(text):
    """The subcommands a help text lists (its `Commands:` section), `help` aside."""
    found, inside = [], False
    for line in text.splitlines():
        if line.startswith("Commands:"):
            inside = True
            continue
        if inside:
            m = re.match(r"^  (\S+)\s", line)
            if not line.strip() or not line.startswith(" "):
                break
            if m and m.group(1) != "help":
                found.append(m.group(1))
    return found


def walk(binary, path, out):
    text = help_of(binary, path)
    title = " ".join(["robotsgate", *path])
    level = "#" * min(2 + len(path), 4)
    out += [f"{level} `{title}`" if path else "## `robotsgate`", "", "```text", text.rstrip(), "```", ""]
    for sub in subcommands(text):
        walk(binary, [*path, sub], out)


def main():
    args = [a for a in sys.argv[1:] if a != "--check"]
    if len(args) != 1:
        sys.exit("usage: cli_reference.py PATH_TO_ROBOTSGATE [--check]")
    lines = [HEAD]
    walk(args[0], [], lines)
    text = "\n".join(lines).rstrip() + "\n"
    if "--check" in sys.argv[1:]:
        with open(OUT) as f:
            if f.read() != text:
                sys.exit("docs/cli.md differs from the binary's help: run scripts/cli_reference.py")
        return
    with open(OUT, "w") as f:
        f.write(text)
    print(f"wrote {OUT}")


main()
