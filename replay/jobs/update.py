"""Re-record committed goldens on purpose, and say what changed before replacing anything.

Every golden in a directory is re-recorded from the scenario stored in it, against a reference
server, and compared with the old one by the replay rules (`compare_goldens`, policy `exact` by
default). A golden whose every compared bit is the same is left untouched on disk (a rewrite
would only churn timestamps in version control); a changed one is replaced, unless this is a dry
run, which is how CI asks "would re-recording change anything?".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace, field
from pathlib import Path
from typing import Any

from replay.utils import aio
from replay.server.transport import ClientOptions
from replay.server.connection import Connection, connect
from replay.judge.diff import Policy
from replay.utils.errors import GoldenError, ModelMismatch
from replay.golden.fingerprint import ModelIdentity, model_identity, model_mismatch
from replay.golden.model import Golden
from replay.run.compare import compare_goldens
from replay.golden.store import read_golden, write_golden
from replay.run.recorder import RecordOptions
from replay.golden.scenario import ScenarioSpec, build_plan
from replay.jobs.session import known_secrets, record_connected, reference_warnings
from replay.server.target import ServerTarget
from replay.utils.redact import scrubbed_errors

UNCHANGED = "unchanged"
CHANGED = "changed"
ERROR = "error"

Notify = Callable[["UpdateResult"], None]


@dataclass
class UpdateResult:
    path: Path
    status: str  # unchanged | changed | error
    written: bool = False  # the new recording replaced the old golden
    report: dict[str, Any] | None = None  # compare_goldens(old, new): what changed, by request
    error: str | None = None
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class UpdateOptions:
    policy: Policy = Policy("exact")
    record: RecordOptions = RecordOptions()
    dry_run: bool = False  # compare only, never write
    allow_model_change: bool = False  # re-record goldens of another model than the server's


def find_goldens(directory: Path) -> list[Path]:
    """Every NAME.zarr under `directory` (recursively, not inside another golden), sorted."""
    directory = Path(directory)
    found = [p for p in directory.rglob("*.zarr") if p.is_dir()]
    outermost = [p for p in found if not any(q != p and q in p.parents for q in found)]
    return sorted(outermost)


def report_path(report_dir: Path, directory: Path, golden: Path) -> Path:
    """Where `--report-dir` keeps one golden's comparison: the golden's path under `directory`,
    mirrored, plus `.json` (`h200/qwen.zarr` -> `h200/qwen.zarr.json`), so goldens of the same
    name in different directories never overwrite each other."""
    rel = Path(golden).relative_to(directory)
    return Path(report_dir) / rel.parent / f"{rel.name}.json"


def update_goldens(directory: Path, target: ServerTarget | str, *,
                   options: UpdateOptions = UpdateOptions(),
                   client_options: ClientOptions | None = None, api: str = "auto",
                   notify: Notify | None = None) -> list[UpdateResult]:
    """Re-record every golden in `directory` against the target's server; one result per golden.

    A golden that cannot be read or re-recorded is an `error` result; the others still run.
    A server that cannot be reached at all raises ServerError before any golden is touched.
    """
    paths = find_goldens(directory)
    if isinstance(target, str):
        target = ServerTarget(url=target)

    async def go(url: str) -> list[UpdateResult]:
        results = []
        async with connect(url, client_options, api, reference=True) as conn:
            server_info = await conn.server_info()
            warnings = reference_warnings(server_info, conn.api)
            serving = model_identity(await conn.model_info(), server_info)
            for path in paths:
                result, new = await update_one(conn, path, options, serving=serving)
                result.warnings = warnings
                results.append(result)
                if notify:
                    notify(result)  # shown before the golden is replaced
                if new is not None and not options.dry_run:
                    replace_golden(result, new, notify)
        return results

    secrets = known_secrets(client_options or ClientOptions(), target)
    with scrubbed_errors(secrets), target.serving((client_options or ClientOptions()).api_key) as url:
        return aio.run(go(url))


async def update_one(conn: Connection, path: Path, options: UpdateOptions, *,
                     serving: ModelIdentity | None = None) -> tuple[UpdateResult, Golden | None]:
    """Re-record and compare one golden; the new recording comes back only when it changed.
    A golden recorded with another model than the server's (`serving`) is an error unless
    `options.allow_model_change`: replacing it would silently change what it tests."""
    try:
        old = read_golden(path)
        recorded = model_identity(old.meta.get("model_info") or {}, old.meta.get("server_info") or {})
        changed = model_mismatch(recorded, serving) if serving is not None else None
        if changed and not options.allow_model_change:
            raise ModelMismatch(f"{changed}: not re-recorded (pass --allow-model-change to "
                                "replace it)")
        new = await rerecord(conn, old, options.record)
        report = compare_goldens(old, new, str(path), f"{path} (re-recorded)", options.policy)
    except GoldenError as exc:
        return UpdateResult(path, ERROR, error=str(exc)), None
    if report["verdict"] == "pass":
        return UpdateResult(path, UNCHANGED, report=report), None
    return UpdateResult(path, CHANGED, report=report), new


def replace_golden(result: UpdateResult, new: Golden, notify: Notify | None) -> None:
    """Atomically replace the old golden; a failed write turns the result into an error."""
    try:
        write_golden(new, result.path, force=True)
    except GoldenError as exc:
        result.status, result.error = ERROR, f"could not replace it: {exc}"
        if notify:
            notify(result)
        return
    result.written = True


async def rerecord(conn: Connection, old: Golden, options: RecordOptions) -> Golden:
    """The same scenario (seed, shape, top-k) recorded again: the same tree, fresh outputs."""
    plan = build_plan(ScenarioSpec.from_dict(dict(old.scenario)))
    kind = old.meta.get("reference", options.reference)  # a cached reference stays one
    return await record_connected(conn, plan, replace(options, reference=kind))
