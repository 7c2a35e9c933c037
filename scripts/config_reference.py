#!/usr/bin/env python3
"""Writes docs/configuration.md, the configuration reference, from the configuration
types themselves (src/config/*.rs): each key's path, type, default and doc comment.

Run it after adding, renaming or removing a key:  python3 scripts/config_reference.py
`--check` writes nothing and fails when the reference differs from what it would write
(the test `docs::the_configuration_reference_is_what_its_generator_writes` runs it);
`docs::every_configuration_key_has_its_entry` fails until the reference lists exactly
the keys the parser accepts."""

import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCES = os.path.join(ROOT, "src", "config")
OUT = os.path.join(ROOT, "docs", "configuration.md")

# Defaults the code computes rather than writes as one literal.
SPELLED_OUT = {
    "robots.user_agent": "robotsgate's own (see below)",
    "egress.allowed_ports": "[80, 443, 1025-65535]",
    "access.allow_clients": "[127.0.0.0/8, ::1/128, 10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16, fc00::/7]",
    "fleet.redis_sentinel.master": '""',
    "fleet.peer_scope": '[{members: ["*"], users: ["*"], clients: [0.0.0.0/0, ::/0]}]',
    "fleet.peer_scope.members": '["*"]',
    "fleet.peer_scope.users": '["*"]',
}

FIELD = re.compile(r"^\s*pub (\w+): (.+),\s*$")
STRUCT = re.compile(r"^pub struct (\w+) \{")


def read_sources():
    text = {}
    for name in sorted(os.listdir(SOURCES)):
        if name.endswith(".rs") and name != "tests.rs":
            with open(os.path.join(SOURCES, name)) as f:
                text[name] = f.read()
    return text


def structs(sources):
    """Every `pub struct` with its doc comment and fields (name, type, doc)."""
    found = {}
    for text in sources.values():
        lines = text.splitlines()
        doc, attributes = [], []
        i = 0
        while i < len(lines):
            line = lines[i]
            stripped = line.strip()
            if stripped.startswith("///"):
                doc.append(stripped[3:].strip())
            elif stripped.startswith("#["):
                attributes.append(stripped)
            else:
                match = STRUCT.match(line)
                if match:
                    fields, field_doc, default_fn = [], [], None
                    i += 1
                    while i < len(lines) and not lines[i].startswith("}"):
                        inner = lines[i].strip()
                        if inner.startswith("///"):
                            field_doc.append(inner[3:].strip())
                        elif inner.startswith("#["):
                            named = re.search(r'default = "(\w+)"', inner)
                            default_fn = named.group(1) if named else default_fn
                        else:
                            field = FIELD.match(lines[i])
                            if field:
                                fields.append((field.group(1), field.group(2), " ".join(field_doc),
                                               default_fn))
                            field_doc, default_fn = [], None
                        i += 1
                    # A struct read from one string (`try_from = "String"`) is a value.
                    if not any("try_from" in a for a in attributes):
                        found[match.group(1)] = (" ".join(doc), fields)
                doc, attributes = [], []
            i += 1
    return found


def defaults(sources):
    """`field: expression` of each `impl Default for X` block, by struct."""
    found = {}
    for text in sources.values():
        for block in re.finditer(r"impl Default for (\w+) \{(.*?)\n\}\n", text, re.S):
            values = {}
            body = block.group(2)
            for field in re.finditer(r"^\s{12}(\w+): (.+?),?$", body, re.M):
                values[field.group(1)] = field.group(2).rstrip(",")
            found[block.group(1)] = values
    return found


def function_value(sources, name):
    """The expression a one-line default function (`#[serde(default = "name")]`) returns."""
    for text in (sources or {}).values():
        found = re.search(rf"fn {name}\(\) -> [\w:<>]+ \{{\n\s+(.+?)\n\}}", text)
        if found:
            return found.group(1).strip()
    return None


def inner_type(rust_type):
    """The struct a field's type holds (`Option<X>`, `Vec<X>`, `X`)."""
    rust_type = re.sub(r"(?:\w+::)+", "", rust_type)
    match = re.match(r"^(?:Option|Vec)<(\w+)>$", rust_type)
    return match.group(1) if match else rust_type


def shown_default(expression):
    """A default expression as YAML would say it (best effort)."""
    if expression is None:
        return None
    simple = {
        "None": "unset", "Vec::new()": "[]", "HashMap::new()": "{}", "BTreeMap::new()": "{}",
        "false": "false", "true": "true", "String::new()": '""',
    }
    if expression in simple:
        return simple[expression]
    for wrapper in ("Timeout", "Seconds"):
        match = re.match(rf"^{wrapper}(?:::new)?\(([\d._ *]+)\)$", expression)
        if match:
            return arithmetic(match.group(1))
    if re.match(r"^[\d_. *]+$", expression):
        return arithmetic(expression)
    match = re.match(r"^(Some\()?SocketAddr::from\(\(\[(\d+), (\d+), (\d+), (\d+)\], (\d+)\)\)\)?$", expression)
    if match:
        return ".".join(match.group(i) for i in range(2, 6)) + ":" + match.group(6)
    ranges = re.findall(r"PortRange\((\d+), (\d+)\)", expression)
    if expression.startswith("vec![PortRange") and ranges:
        return "[" + ", ".join(a if a == b else f"{a}-{b}" for a, b in ranges) + "]"
    match = re.match(r"^\[(.*)\]$", expression)
    if match:
        return "[" + match.group(1).replace('"', "") + "]"
    match = re.match(r'^"(.*)"\.(?:into|to_string)\(\)$', expression)
    if match:
        return match.group(1)
    match = re.match(r"^\w+::(\w+)$", expression)
    if match:
        return re.sub(r"(?<!^)([A-Z])", r"_\1", match.group(1)).lower()
    return None


def arithmetic(text):
    """`16 * 1024`, `7.0 * 86_400.0`: the product, as YAML would write it."""
    product = 1.0
    for factor in text.replace("_", "").split("*"):
        product *= float(factor)
    return str(int(product)) if product == int(product) else str(product)


def enum_default(sources, rust_type):
    """The `#[default]` variant of enum `rust_type`, as the file spells it."""
    for text in sources.values():
        found = re.search(rf"pub enum {rust_type} \{{(.*?)\n\}}", text, re.S)
        if found:
            variant = re.search(r"#\[default\]\s*(?:///.*\n\s*)*(\w+)", found.group(1))
            if variant:
                return re.sub(r"(?<!^)([A-Z])", r"_\1", variant.group(1)).lower()
    return None


def type_default(sources, rust_type):
    """A field's default when its struct derives `Default`: its type's."""
    if rust_type.startswith("Option<"):
        return "unset"
    if rust_type.startswith("Vec<"):
        return "[]"
    if rust_type.startswith(("BTreeMap<", "HashMap<")):
        return "{}"
    if rust_type == "bool":
        return "false"
    return enum_default(sources, rust_type)


def entries(found, default_values, struct, path, out, sources=None, item=False):
    doc, fields = found[struct]
    for name, rust_type, field_doc, default_fn in fields:
        key = f"{path}.{name}" if path else name
        nested = inner_type(rust_type)
        if nested in found and nested not in ("Cidr",):
            listed = rust_type.startswith("Vec<")
            out.append(("section", key, rust_type, field_doc, SPELLED_OUT.get(key)))
            entries(found, default_values, nested, key, out, sources, item or listed)
        else:
            if default_fn:
                default = shown_default(function_value(sources, default_fn))
            elif struct in default_values:
                default = shown_default(default_values[struct].get(name))
            else:
                default = type_default(sources, rust_type)
                if default is None and item:
                    default = "required"
            default = SPELLED_OUT.get(key, default)
            out.append(("key", key, rust_type, field_doc, default))


# Pingora's own keys (the file's top level), written by hand: Pingora's ServerConf.
PINGORA = """## Pingora's server settings (the file's top level)

The keys at the file's top level are Pingora's `ServerConf`, read by Pingora itself;
every one the shipped configurations set is here (a test, `docs.rs`, checks that). The
rest: [Pingora's configuration guide](https://github.com/cloudflare/pingora/blob/main/docs/user_guide/conf.md).

### `version`

Type: integer; required: `1`.

The configuration file's format version.

### `threads`

Type: integer; default: `1`.

Worker threads of each service (the proxy, the admin listener, ...). One per core.

### `pid_file`

Type: path; default: `/tmp/pingora.pid`.

Where the process writes its PID (a daemon; `systemctl reload` reads it).

### `upgrade_sock`

Type: path; default: `/tmp/pingora_upgrade.sock`.

The socket a graceful upgrade hands the listening sockets over: each instance on a
host needs its own.

### `error_log`

Type: path or `null`; default: `null`.

Pingora's own error log; `null` logs to standard error (the journal, under systemd).

### `grace_period_seconds`

Type: integer (seconds); default: `300`.

On a graceful upgrade (SIGQUIT), how long the old process goes on serving the requests
it has, after Pingora's 5 s, before it shuts its runtimes down. A request still waiting
(for a turn, for another member's answer) half a second before 5 s plus this from the
signal is answered 503 with `Retry-After`. A stop (SIGTERM) does not wait for it: it
drains instead (`graceful_shutdown_timeout_seconds`).

### `graceful_shutdown_timeout_seconds`

Type: integer (seconds); default: `5`.

How long a stop (SIGTERM) waits for the requests in progress (`/readyz` answering
503, no keep-alive meanwhile) before the process stops. Requests still waiting then
(for a turn, for another member's answer) are answered 503 with `Retry-After` half a
second before that bound from the signal (`reason=stopping` for a turn). On a graceful
upgrade, the old process's runtimes get that long to finish after
`grace_period_seconds`.

### `upstream_keepalive_pool_size`

Type: integer; default: `128`.

Idle connections to origins kept for reuse, per worker thread: the pool holds at most
this many times `threads`. The shipped files set 1024: a crawler fleet talks to many
origins, and a connection kept saves a TCP (and TLS) handshake per request.

"""


def main():
    sources = read_sources()
    found = structs(sources)
    default_values = defaults(sources)
    out = []
    entries(found, default_values, "Config", "", out, sources)
    lines = [
        "# Configuration reference",
        "",
        "Every key of the `robotsgate:` section of the configuration file, with its type,",
        "its default and what it does. Written from the configuration types' own",
        "documentation by `scripts/config_reference.py`; a test (`docs.rs`) fails when a",
        "key the parser accepts has no entry here, or an entry names a key it refuses.",
        "",
        "Check a file before you use it: `robotsgate check-config --config FILE` names the",
        "key and the line of each error. Durations are in seconds (decimals allowed),",
        "networks in CIDR notation (`10.0.0.0/8`; a bare address is one host).",
        "The keys at the file's top level are Pingora's server settings: see",
        "[below](#pingoras-server-settings-the-files-top-level).",
        "",
        "A full example with comments: [`conf/robotsgate.yaml`](../conf/robotsgate.yaml);",
        "a fleet member's: [`conf/fleet.yaml`](../conf/fleet.yaml).",
        "",
    ]
    for kind, key, rust_type, doc, default in out:
        if kind == "section" and "." not in key:
            lines += [f"## `{key}`", "", doc or "", ""]
            continue
        lines += [f"### `{key}`", ""]
        facts = [f"Type: `{rust_type}`"]
        if kind == "key" or default is not None:
            facts.append(f"default: `{default}`" if default is not None else "default: see the type")
        lines += ["; ".join(facts) + ".", ""]
        if doc:
            lines += [doc, ""]
    lines += [PINGORA]
    text = "\n".join(lines).rstrip() + "\n"
    if "--check" in sys.argv[1:]:
        with open(OUT) as f:
            if f.read() != text:
                sys.exit(f"{OUT} differs from what the configuration types say: "
                         "run python3 scripts/config_reference.py")
        print(f"{OUT} is current", file=sys.stderr)
        return
    with open(OUT, "w") as f:
        f.write(text)
    print(f"wrote {OUT}: {sum(1 for e in out if e[0] == 'key')} keys", file=sys.stderr)


if __name__ == "__main__":
    main()
