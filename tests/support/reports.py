"""A report document as a file holds it.

A replay's document makes each request entry when it is read (replay/report/entries.py), so
an entry changed in place is not kept. A test that edits a report (a lying shard, a corrupt
row) edits what `golden report` and the history would read: the document's JSON, loaded.
"""

from __future__ import annotations

import json
from typing import Any

from replay.report.files import json_text


def as_read_from_file(doc: dict[str, Any]) -> dict[str, Any]:
    """`doc` written as its report file and read back: plain lists and dicts throughout."""
    return json.loads(json_text(doc))
