"""A report document (docs/report.md) as history rows, or a refusal saying in one line why not.

Everything is checked before anything is written, so a corrupt or hostile report leaves the
history as it was: the shape and type of every field used, sizes (a column never overflows,
text never holds NUL or a lone surrogate, PostgreSQL refuses both), integer ranges, and that
the verdict agrees with the requests (a `pass` with a failed request is not a pass), and that
its time is one a replay could have had (from 2000 to a day from now: one hostile date must not
stretch every page). A matrix document gives one run per profile.
A run is its `run_id` (made when the run was made); a report without one (written before run
ids) is identified by its digest. The server is keyed by its identifying settings only
(identity.py), with its launch profile beside them.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from replay.history.identity import launch_profile, server_flags
from replay.utils.errors import UsageError
from replay.utils.json_arrays import as_plain, is_array

SCHEMA_PREFIX = "golden-replay/report/"
VERDICTS = ("pass", "fail", "error")
MAX_REPORT_BYTES = 256 * 1024 * 1024
MAX_REQUESTS = 1_000_000
MAX_FLAGS_CHARS = 1_000_000
MAX_MESSAGE_CHARS = 4000  # error and cache_problem text is cut here, not refused
INT32 = 2**31 - 1
INT64 = 2**63 - 1
HEX64 = re.compile(r"^[0-9a-f]{64}$")
RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,79}$")
MAX_CLIENT_CHARS = 2000
EARLIEST = datetime(2000, 1, 1)  # a run's time is refused before this, or over a day from now
UNKNOWN_VERSION = "unknown"


class NotAReport(UsageError):
    """The input is not a report the history can keep (exit 2); nothing was written."""


@dataclass(frozen=True)
class OutcomeRecord:
    position: int
    request_id: str
    repeat: int
    status: str
    passed: bool
    cached_tokens: int | None
    tiers: str | None
    expected_min_cached: int | None
    cache_problem: str | None
    tokens_compared: int | None
    max_ulp: int | None
    mean_kl: float | None
    divergence_position: int | None
    divergence_kind: str | None
    token_divergence_position: int | None


@dataclass(frozen=True)
class RunRecord:
    report_sha256: str
    run_id: str
    golden_key: str
    golden_name: str
    verdict: str
    error: str | None
    run_at: datetime | None  # None: the report does not say; the time it is added
    server: str
    server_version: str
    api: str | None
    model: str | None
    tool: str | None
    flags_sha256: str
    flags: str
    profile: str | None
    client: str | None
    numerics_sha256: str
    numerics: str
    policy: str | None
    expect_cache: str | None
    shard: str | None
    merged: bool
    requests: int
    requests_failed: int
    repeats: int
    tokens_compared: int
    outcomes: tuple[OutcomeRecord, ...]


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False, default=as_plain)


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def read_report(path: Path) -> Any:
    """The JSON document in `path` (any JSON: `records` checks it), or a refusal."""
    try:
        size = path.stat().st_size
        if size > MAX_REPORT_BYTES:
            raise NotAReport(f"{path}: {size} bytes is over the {MAX_REPORT_BYTES} a report may have")
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise NotAReport(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise NotAReport(f"cannot read {path}: it is not UTF-8 text") from None
    try:
        return json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        what = f"{exc.msg} at line {exc.lineno}" if isinstance(exc, json.JSONDecodeError) else "nested too deeply"
        raise NotAReport(f"{path} is not valid JSON: {what}") from None


def records(doc: Any, where: str = "the report") -> list[RunRecord]:
    """The runs of one report document (a matrix holds one per profile)."""
    if not isinstance(doc, dict):
        raise NotAReport(f"{where} is not a golden-replay report: the JSON is not an object")
    schema = doc.get("schema")
    if not isinstance(schema, str) or not schema.startswith(SCHEMA_PREFIX):
        raise NotAReport(f"{where} is not a golden-replay report: schema {schema!r:.80} does "
                         f"not start with {SCHEMA_PREFIX!r}")
    if "matrix" in doc:
        matrix = _dict(doc, "matrix", where)
        reports = _dict(matrix, "reports", where)
        return [r for name, sub in reports.items()
                for r in records(sub, f"{where} (profile {str(name)[:80]})")]
    try:
        return [_record(doc)]
    except _Bad as exc:
        raise NotAReport(f"{where} is refused: {exc}") from None


class _Bad(Exception):
    """One field is wrong (the message names it)."""


def _dict(doc: dict[str, Any], key: str, where: str) -> dict[str, Any]:
    value = doc.get(key)
    if not isinstance(value, dict):
        raise NotAReport(f"{where} is refused: {key} is not an object")
    return value


def _text(value: Any, field: str, limit: int, *, optional: bool = True, cut: bool = False) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise _Bad(f"{field} is {type(value).__name__}, not text")
    if "\x00" in value:
        raise _Bad(f"{field} holds a NUL character")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise _Bad(f"{field} holds a lone surrogate (not UTF-8)") from None
    if len(value) > limit:
        if not cut:
            raise _Bad(f"{field} is {len(value)} characters long (at most {limit})")
        value = value[:limit]
    return value


def _int(value: Any, field: str, limit: int = INT32, *, optional: bool = True,
         infinite: bool = False) -> int | None:
    if value is None and optional:
        return None
    if infinite and value == "inf":
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Bad(f"{field} is {value!r:.40}, not a whole number")
    if not 0 <= value <= limit:
        raise _Bad(f"{field} is {value}, outside 0..{limit}")
    return value


def _float(value: Any, field: str) -> float | None:
    if value is None or value in ("nan", "inf", "-inf"):
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _Bad(f"{field} is {value!r:.40}, not a number")
    return float(value)


def _time(value: Any) -> datetime | None:
    if value is None:
        return None
    text = _text(value, "server_meta.created", 64)
    try:
        when = datetime.fromisoformat(str(text))
        if when.tzinfo is not None:
            when = when.astimezone(timezone.utc).replace(tzinfo=None)
    except ValueError:
        raise _Bad(f"server_meta.created {text!r} is not an ISO time") from None
    except OverflowError:
        raise _Bad(f"server_meta.created {text!r} is out of range") from None
    latest = datetime.now(timezone.utc).replace(tzinfo=None) + timedelta(days=1)
    if not EARLIEST <= when <= latest:
        raise _Bad(f"server_meta.created {text!r} is not a time a replay ran (accepted: "
                   f"{EARLIEST.year} to a day from now)")
    return when


def _run_id(doc: dict[str, Any], digest: str) -> str:
    value = doc.get("run_id")
    if value is None:
        return "report:" + digest
    if not isinstance(value, str) or not RUN_ID.match(value):
        raise _Bad(f"run_id {value!r:.90} is not a run id (letters, digits, _.:-, at most 80)")
    return value


def _client(doc: dict[str, Any]) -> str | None:
    """The client settings the report names (`client`), canonical JSON."""
    client = _meta(doc, "client")
    if not client:
        return None
    text = canonical(client)
    if len(text) > MAX_CLIENT_CHARS:
        raise _Bad(f"client is {len(text)} characters (at most {MAX_CLIENT_CHARS})")
    return _text(text, "client", MAX_CLIENT_CHARS)


def _meta(doc: dict[str, Any], key: str) -> dict[str, Any]:
    value = doc.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _Bad(f"{key} is not an object")
    return value


def golden_key(doc: dict[str, Any], golden_meta: dict[str, Any]) -> str:
    """The golden's content checksum (`golden_sha256`, docs/report.md); for reports without one
    (older ones) a digest of its metadata less its shard, else of its name."""
    digest = doc.get("golden_sha256")
    if isinstance(digest, str) and HEX64.match(digest):
        return digest
    if golden_meta:
        return "meta:" + sha256(canonical({k: v for k, v in golden_meta.items() if k != "shard"}))
    return "name:" + sha256(str(doc.get("golden")))


def server_version(server_info: dict[str, Any]) -> str:
    """What the server says its version is: SGLang's `version`, llama.cpp's `build_info`."""
    for key in ("version", "build_info"):
        value = server_info.get(key)
        if isinstance(value, (str, int, float)) and not isinstance(value, bool) and str(value):
            return _text(str(value), f"server_info.{key}", 200) or UNKNOWN_VERSION
    return UNKNOWN_VERSION


def _shard(doc: dict[str, Any], golden_meta: dict[str, Any]) -> str | None:
    """The shard replayed, "i/n": the report's `shard`, else (older reports) golden_meta's."""
    if doc.get("shard") is not None:
        return _text(doc["shard"], "shard", 40)
    shard = golden_meta.get("shard")
    if not isinstance(shard, dict):
        return None
    index, count = shard.get("index"), shard.get("count")
    return f"{_int(index, 'shard.index', optional=False)}/{_int(count, 'shard.count', optional=False)}"


def _record(doc: dict[str, Any]) -> RunRecord:
    try:
        digest = sha256(canonical(doc))
    except UnicodeEncodeError:
        raise _Bad("it holds a lone surrogate (text that is not UTF-8)") from None
    except (TypeError, ValueError) as exc:  # NaN literals, say
        raise _Bad(f"it cannot be written as strict JSON ({exc})") from None
    verdict = doc.get("verdict")
    if verdict not in VERDICTS:
        raise _Bad(f"verdict is {verdict!r:.40}, not one of {', '.join(VERDICTS)}")
    golden_meta, server_meta = _meta(doc, "golden_meta"), _meta(doc, "server_meta")
    server_info = _meta(server_meta, "server_info")
    model_info = _meta(server_meta, "model_info")
    numerics = _meta(doc, "numerics")
    fields = _meta(numerics, "fields")
    replay_numerics = {str(k): (v.get("replay") if isinstance(v, dict) else None)
                       for k, v in fields.items()}
    flags = canonical(server_flags(server_info))
    if len(flags) > MAX_FLAGS_CHARS:
        raise _Bad(f"the server's settings are {len(flags)} characters (at most {MAX_FLAGS_CHARS})")
    numerics_text = canonical(replay_numerics)
    raw_requests = doc.get("requests") or []
    if not is_array(raw_requests):
        raise _Bad("requests is not a list")
    if len(raw_requests) > MAX_REQUESTS:
        raise _Bad(f"{len(raw_requests)} requests (at most {MAX_REQUESTS})")
    outcomes = tuple(_outcome(i, r) for i, r in enumerate(raw_requests))
    failed = [o for o in outcomes if not o.passed]
    if verdict == "pass" and failed:
        raise _Bad(f"the verdict is pass but request {failed[0].request_id} did not pass")
    summary = _meta(doc, "summary")
    model = model_info.get("model_path") or server_info.get("model_path")
    profile = doc.get("profile") or launch_profile(doc.get("server_target"))
    return RunRecord(
        report_sha256=digest,
        run_id=_run_id(doc, digest),
        golden_key=golden_key(doc, golden_meta),
        golden_name=_text(doc.get("golden"), "golden", 1000, optional=False) or "",
        verdict=str(verdict),
        error=_text(doc.get("error"), "error", MAX_MESSAGE_CHARS, cut=True),
        run_at=_time(server_meta.get("created")),
        server=_text(doc.get("server"), "server", 1000, optional=False) or "",
        server_version=server_version(server_info),
        api=_text(server_meta.get("api"), "server_meta.api", 40),
        model=_text(model if isinstance(model, str) else None, "model_path", 1000),
        tool=_text(server_meta.get("tool"), "server_meta.tool", 200),
        flags_sha256=sha256(flags), flags=flags,
        profile=_text(profile, "profile", 200),
        client=_client(doc),
        numerics_sha256=sha256(numerics_text), numerics=numerics_text,
        policy=_text(doc.get("policy"), "policy", 200),
        expect_cache=_text(doc.get("expect_cache"), "expect_cache", 200),
        shard=None if "merged_from" in doc else _shard(doc, golden_meta),
        merged="merged_from" in doc,
        requests=len({o.request_id for o in outcomes}),
        requests_failed=len(failed),
        repeats=_int(summary.get("repeats"), "summary.repeats") or (1 if outcomes else 0),
        tokens_compared=sum(o.tokens_compared or 0 for o in outcomes),
        outcomes=outcomes,
    )


def _outcome(position: int, r: Any) -> OutcomeRecord:
    if not isinstance(r, dict):
        raise _Bad(f"requests[{position}] is not an object")
    rid = _text(r.get("id"), f"requests[{position}].id", 200, optional=False) or ""
    where = f"request {rid[:80]}"
    passed = r.get("passed")
    if not isinstance(passed, bool):
        raise _Bad(f"{where}: passed is {passed!r:.40}, not true or false")
    details = r.get("cached_tokens_details")
    tiers = None
    if details is not None:
        if not isinstance(details, dict):
            raise _Bad(f"{where}: cached_tokens_details is not an object")
        if len(details) > 8:
            raise _Bad(f"{where}: cached_tokens_details names {len(details)} tiers (at most 8)")
        tiers = canonical({_text(k, f"{where}: a tier name", 40): _int(v, f"{where}: tier {k!r:.40}",
                                                                          optional=False)
                           for k, v in details.items()})
    first = r.get("first_divergence")
    if first is not None and not isinstance(first, dict):
        raise _Bad(f"{where}: first_divergence is not an object")
    first = first or {}
    return OutcomeRecord(
        position=position,
        request_id=rid,
        repeat=_int(r.get("repeat", 0), f"{where}: repeat", optional=False) or 0,
        status=_text(r.get("status"), f"{where}: status", 40, optional=False) or "",
        passed=passed,
        cached_tokens=_int(r.get("cached_tokens"), f"{where}: cached_tokens"),
        tiers=tiers,
        expected_min_cached=_int(r.get("expected_min_cached"), f"{where}: expected_min_cached"),
        cache_problem=_text(r.get("cache_problem"), f"{where}: cache_problem", MAX_MESSAGE_CHARS,
                            cut=True),
        tokens_compared=_int(r.get("tokens_compared"), f"{where}: tokens_compared"),
        max_ulp=_int(r.get("max_ulp"), f"{where}: max_ulp", INT64, infinite=True),
        mean_kl=_float(r.get("mean_kl"), f"{where}: mean_kl"),
        divergence_position=_int(first.get("position"), f"{where}: first_divergence.position"),
        divergence_kind=_text(first.get("kind"), f"{where}: first_divergence.kind", 20),
        token_divergence_position=_int(r.get("token_divergence_position"),
                                       f"{where}: token_divergence_position"),
    )
