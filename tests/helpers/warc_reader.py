#!/usr/bin/env python3
"""Reads a robotsgate evidence WARC with warcio (an independent WARC implementation)
and prints what it holds, as one JSON object: the records of each WARC-Type, the
evidence records (metadata records that are not heads), the decisions among them, and
for each robots.txt response its target URI and the SHA-256 of its payload.

  warc_reader.py BUNDLE.warc
"""
import hashlib
import json
import sys

from warcio.archiveiterator import ArchiveIterator


def main(path):
    types, records, decisions, robots, refers = {}, 0, 0, {}, 0
    with open(path, "rb") as stream:
        for record in ArchiveIterator(stream):
            kind = record.rec_type
            types[kind] = types.get(kind, 0) + 1
            target = record.rec_headers.get_header("WARC-Target-URI")
            if kind == "response":
                payload = record.content_stream().read()
                robots[target] = hashlib.sha256(payload).hexdigest()
            elif kind == "metadata" and not target.endswith(":heads"):
                records += 1
                body = json.loads(record.content_stream().read())
                decisions += body.get("type") == "decision"
                refers += record.rec_headers.get_header("WARC-Refers-To") is not None
    print(json.dumps({"types": types, "records": records, "decisions": decisions,
                      "robots": robots, "refers": refers}))


if __name__ == "__main__":
    main(sys.argv[1])
