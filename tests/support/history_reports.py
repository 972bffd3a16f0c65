"""Report documents for the history tests: the captured sample reports (tests/data/reports,
made by replaying the protocol stub) with the facts a history keys on changed: the server's
version, the time, which requests failed."""

from __future__ import annotations

import copy
import json
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from tests.support import paths

START = datetime(2026, 9, 1, tzinfo=timezone.utc)  # runs up to 999 hours later are past


def sample(name: str) -> dict[str, Any]:
    return json.loads((paths.DATA / "reports" / f"{name}.json").read_text())


def run_report(*, version: str = "0.5.23", hour: int = 0, failing: tuple[str, ...] = (),
               golden_sha256: str = "a" * 64, flags: dict[str, Any] | None = None,
               base: str = "passing") -> dict[str, Any]:
    """A passing sample report as a run on `version` at START + `hour` hours, in which the
    requests named in `failing` failed (a token divergence at position 5)."""
    doc = copy.deepcopy(sample(base))
    doc["golden_sha256"] = golden_sha256
    meta = doc["server_meta"]
    meta["created"] = (START + timedelta(hours=hour)).isoformat(timespec="seconds")
    meta["server_info"] = {**meta["server_info"], "version": version, **(flags or {})}
    for r in doc["requests"]:
        if r["id"] in failing:
            r.update(status="token_divergence", passed=False, token_divergence_position=5,
                     first_divergence={"position": 5, "kind": "token", "golden_token": 1,
                                       "replay_token": 2, "ulp": "inf"})
    doc["verdict"] = "fail" if failing else "pass"
    return doc


def write(doc: dict[str, Any], path: Path) -> Path:
    path.write_text(json.dumps(doc))
    return path
