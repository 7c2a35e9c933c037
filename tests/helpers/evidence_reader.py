#!/usr/bin/env python3
"""An independent reader of robotsgate's evidence bundles (JSON lines), for the tests.

It shares no code with robotsgate: it checks each head's Ed25519 signature with
`cryptography`, the heads' chain (`prev_head`), each record's inclusion proof with its
own RFC 9162 §2.1.3.2 verification, the links of complete segments (`seq`, `prev`), and
each policy's SHA-256; then prints what it counted, as one JSON object:

  evidence_reader.py BUNDLE.jsonl
  {"chains": 1, "records": 8, "decisions": 3, "policies": 1, "heads": 2, "breaks": []}

Exit 0 when nothing broke, 1 otherwise.
"""
import base64
import hashlib
import json
import sys

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey


def b64url(text):
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def sha256(data):
    return hashlib.sha256(data).digest()


def leaf_hash(line):
    return sha256(b"\x00" + line)


def node_hash(left, right):
    return sha256(b"\x01" + left + right)


def proves(m, n, leaf, path, root):
    """RFC 9162 §2.1.3.2: the inclusion of leaf `m` of `n` under `root`."""
    if m >= n:
        return False
    fn, sn, r = m, n - 1, leaf
    for p in path:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            if not fn & 1:
                while not fn & 1 and fn != 0:
                    fn >>= 1
                    sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    return sn == 0 and r == root


def signed_part(line):
    """A signed line's signed part and its signature."""
    at = line.rfind(',"sig":"')
    if at < 0 or not line.endswith('"}'):
        return None, None
    return (line[:at] + "}").encode(), b64url(line[at + len(',"sig":"'):-2])


def main(path):
    entries = [json.loads(l) for l in open(path, encoding="utf-8") if l.strip()]
    header = entries[0]
    complete = header.get("complete", False)
    heads, policies, records, segments = {}, {}, [], {}
    for e in entries[1:]:
        kind = e["kind"]
        if kind == "head":
            heads.setdefault(e["chain"], []).append(e["line"])
        elif kind == "policy":
            policies[e["sha256"]] = base64.b64decode(e["bytes"])
        elif kind == "record":
            line = e["line"].encode() if "line" in e else base64.b64decode(e["line_b64"])
            records.append((e, line))
        elif kind == "segment":
            segments[(e["chain"], e["segment"])] = e["records"]
    breaks = []
    chains = sorted(set(heads) | {e["chain"] for e, _ in records})
    roots = {}
    for chain in chains:
        own = [json.loads(l) for e, l in records if e["chain"] == chain]
        starts = [r for r in own if r.get("type") == "start"]
        first_head = next((json.loads(h) for h in heads.get(chain, []) if '"head":1' in h), None)
        jwk = starts[0]["key"] if starts else (first_head or {}).get("key")
        if not jwk:
            breaks.append(f"{chain}: no key")
            continue
        key = Ed25519PublicKey.from_public_bytes(b64url(jwk["x"]))
        prev = b"\x00" * 32
        for n, line in enumerate(heads.get(chain, [])):
            body, sig = signed_part(line)
            try:
                key.verify(sig, body)
            except (InvalidSignature, TypeError, ValueError):
                breaks.append(f"{chain}: head {n + 1}: bad signature")
            head = json.loads(line)
            if bytes.fromhex(head["prev_head"]) != prev:
                breaks.append(f"{chain}: head {n + 1}: not chained")
            prev = sha256(line.encode())
            if "segment" in head:
                roots[(chain, head["segment"], head["size"])] = bytes.fromhex(head["root"])
    by_segment = {}
    for e, line in records:
        if e.get("size") is not None:
            root = roots.get((e["chain"], e["segment"], e["size"]))
            path_ = [bytes.fromhex(h) for h in e["proof"]]
            if root is None or not proves(e["index"], e["size"], leaf_hash(line), path_, root):
                breaks.append(f"{e['chain']}: segment {e['segment']} record {e['index']}: not proven")
        by_segment.setdefault((e["chain"], e["segment"]), []).append((e["index"], line))
    if complete:
        for (chain, segment), count in segments.items():
            lines = [l for _, l in sorted(by_segment.get((chain, segment), []))]
            if len(lines) != count:
                breaks.append(f"{chain}: segment {segment}: {len(lines)} records of {count}")
            for before, after in zip(lines, lines[1:]):
                a, b = json.loads(before), json.loads(after)
                if b["seq"] != a["seq"] + 1 or b["prev"] != sha256(before).hex():
                    breaks.append(f"{chain}: seq {b['seq']} does not follow seq {a['seq']}")
    for sha, data in policies.items():
        if sha256(data).hex() != sha:
            breaks.append(f"policy {sha}: wrong octets")
    decisions = sum(1 for _, l in records if json.loads(l).get("type") == "decision")
    print(json.dumps({
        "chains": len(chains),
        "records": len(records),
        "decisions": decisions,
        "policies": len(policies),
        "heads": sum(len(h) for h in heads.values()),
        "breaks": breaks,
    }))
    return 0 if not breaks else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
