#!/usr/bin/env python3
"""An independent reader of robotsgate's statement feed: feedparser (PyPI), a feed
library the code under test has no part in. Prints what it read as JSON: whether the
feed was well formed (`bozo` 0), the feed's id and title, and each entry's id, title
and updated time, in the feed's order.

Usage: feed_reader.py FILE
"""
import json
import sys

import feedparser

feed = feedparser.parse(sys.argv[1])
print(json.dumps({
    "bozo": int(bool(feed.bozo)),
    "error": str(feed.get("bozo_exception", "")),
    "version": feed.version,
    "id": feed.feed.get("id"),
    "title": feed.feed.get("title"),
    "entries": [{"id": e.get("id"), "title": e.get("title"), "updated": e.get("updated")}
                for e in feed.entries],
}))
