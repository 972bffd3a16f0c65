"""What `golden history` does, one function per subcommand, each over a history location (a
file path or a database URL): add reports, list runs, show one golden, write the page. The
publishing step feeds the reports the tool writes through `add_documents`
(replay/jobs/publish.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from replay.history.database import locate
from replay.history.ingest import RunRecord, read_report, records
from replay.history.queries import golden_history, golden_keys, goldens, run_summary
from replay.history.store import Added, GoldenSelector, HistoryStore
from replay.utils.errors import UsageError

DEFAULT_HISTORY = "golden-history.sqlite"
PAGE_GOLDENS = 50  # the page draws at most this many goldens, the most recent first


def add_documents(where: str, docs: list[Any]) -> Added:
    """Add report documents (already in memory), all or none."""
    batch: list[RunRecord] = [r for doc in docs for r in records(doc)]
    with HistoryStore.open(where) as store:
        return store.add(batch)


def add_files(where: str, paths: list[Path]) -> Added:
    """Add report files: every one is read and checked first, so one bad file adds nothing."""
    batch = [r for path in paths for r in records(read_report(path), str(path))]
    with HistoryStore.open(where) as store:
        return store.add(batch)


def existing(where: str) -> str:
    """A history to read must exist: a SQLite file that is not there is a typo, not an empty
    history (reading never creates one)."""
    path = locate(where).sqlite_path
    if path is not None and not path.is_file():
        raise UsageError(f"there is no history at {path} (runs are added by "
                         "`golden --history PATH replay ...` or `golden history add`)")
    return where


def selector(golden: str) -> GoldenSelector:
    """GOLDEN as the user gave it: a golden directory (its content digest), a digest prefix, a
    name."""
    path = Path(golden)
    if (path / "zarr.json").is_file():
        from replay.golden.store import content_checksum, open_golden

        return GoldenSelector(text=golden, digest=content_checksum(open_golden(path)))
    return GoldenSelector(text=golden)


def list_runs(where: str, *, limit: int = 50, golden: str | None = None) -> list[dict[str, Any]]:
    with HistoryStore.open(existing(where)) as store:
        keys = golden_keys(store, selector(golden)) if golden else None
        found = store.list_runs(limit=limit, keys=keys)
    return [run_summary(r) for r in found]


def show(where: str, golden: str) -> dict[str, Any]:
    with HistoryStore.open(existing(where)) as store:
        return golden_history(store, selector(golden))


def prune(where: str, before: str) -> int:
    """Delete the runs from before `before` (an ISO date or time, UTC); how many."""
    from datetime import datetime, timezone

    try:
        when = datetime.fromisoformat(before)
    except ValueError:
        raise UsageError(f"--before {before!r} is not an ISO date or time (e.g. 2026-06-01)") from None
    if when.tzinfo is not None:
        when = when.astimezone(timezone.utc).replace(tzinfo=None)
    with HistoryStore.open(existing(where)) as store:
        return store.prune(when)


def write_page(where: str, out: Path, *, golden: str | None = None, runs: int = 100) -> Path:
    """DIR/index.html; the DIR is created."""
    from replay.history.page import render_page

    with HistoryStore.open(existing(where)) as store:
        chosen = [selector(golden)] if golden else goldens(store)[:PAGE_GOLDENS]
        histories = [golden_history(store, s) for s in chosen]
        latest = [run_summary(r) for r in store.list_runs(limit=runs)]
        text = render_page(histories, latest, store.where)
    out.mkdir(parents=True, exist_ok=True)
    return _write(out / "index.html", text)


def _write(page: Path, text: str) -> Path:
    """The page replaced whole (a reader never sees half of it)."""
    tmp = page.with_name(f".{page.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(page)
    return page
