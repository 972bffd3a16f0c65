"""Replay one golden against several launched server configurations, one after the other.

Each profile gets its own server (started by `replay.launch.launched`, stopped before the next
one starts, so they never compete for the accelerator) and its own ordinary replay report. The
matrix document wraps those reports; its verdict is the worst of them (error > fail > pass). A
profile whose server cannot start is an `error` report for that profile only: the other
configurations still run and still say something.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ContextManager
from xml.etree import ElementTree as ET

from replay import aio
from replay.client import ClientOptions, ServerClient
from replay.errors import GoldenError, UsageError
from replay.fingerprint import redact_url
from replay.golden import Golden
from replay.golden_store import read_golden
from replay.launch import LaunchProfile, check_values, launched, load_profile
from replay.replayer import ReplayOptions, replay
from replay.report import SCHEMA, ReplayResult, junit_xml, report_dict
from replay.shard import shard_golden

Tick = Callable[[str], None]
ProgressBar = Callable[[str, int], ContextManager[Tick]]  # (label, total) -> context of a tick
Notify = Callable[[str], None]
VERDICT_RANK = {"pass": 0, "fail": 1, "error": 2}


@dataclass(frozen=True)
class LaunchSettings:
    """What every profile of a matrix is launched with."""

    model: str | None = None
    log_dir: Path = Path("golden-logs")
    fault: str | None = None
    extra_args: tuple[str, ...] = field(default_factory=tuple)
    attention_backend: str | None = None  # None: the default for the visible GPU (replay/gpu.py)


def worst_verdict(verdicts: Sequence[str]) -> str:
    return max(verdicts, key=VERDICT_RANK.__getitem__, default="error")


def load_golden(golden_path: Path, shard: str | None = None) -> Golden:
    golden = read_golden(golden_path)
    return shard_golden(golden, shard) if shard else golden


def replay_result(url: str, golden: Golden, golden_name: str, options: ReplayOptions,
                  copts: ClientOptions, tick: Tick | None = None) -> ReplayResult:
    """One replay against a running server; errors propagate (GoldenError)."""

    async def go() -> ReplayResult:
        async with ServerClient(url, copts) as client:
            return await replay(client, golden, golden_name, options, progress=tick)

    return aio.run(go())


def replay_report(url: str, golden: Golden, golden_name: str, options: ReplayOptions,
                  copts: ClientOptions, tick: Tick | None = None) -> dict[str, Any]:
    """One replay as the normal report dict; a GoldenError becomes an `error` report."""
    try:
        result = replay_result(url, golden, golden_name, options, copts, tick)
    except GoldenError as exc:
        return report_dict(None, golden=golden_name, server=redact_url(url),
                           policy=str(options.policy), error=str(exc))
    return report_dict(result, golden=golden_name, server=redact_url(url), policy=str(options.policy))


def resolve_profiles(names: Sequence[str], settings: LaunchSettings) -> list[LaunchProfile]:
    """Every profile loaded and checked before any server starts: a typo or a missing --model
    must not surface after an hour of other profiles."""
    if not names:
        raise UsageError("give at least one --launch PROFILE")
    profiles = [load_profile(n) for n in names]
    seen: set[str] = set()
    for p in profiles:
        if p.name in seen:
            raise UsageError(f"launch profile {p.name!r} is given twice")
        seen.add(p.name)
        check_values(p, model=settings.model, fault=settings.fault,
                     attention_backend=settings.attention_backend)
    return profiles


def replay_profile(profile: LaunchProfile, golden: Golden, golden_name: str,
                   options: ReplayOptions, copts: ClientOptions, settings: LaunchSettings,
                   progress_bar: ProgressBar | None = None,
                   notify: Notify | None = None) -> dict[str, Any]:
    """Launch, replay, stop: the profile's report, `error` when anything prevented a verdict."""
    log_path = Path(settings.log_dir) / f"{profile.name}.log"
    server = f"launch:{profile.name}"
    try:
        with launched(profile, model=settings.model, log_path=log_path, fault=settings.fault,
                      extra_args=settings.extra_args, attention_backend=settings.attention_backend,
                      notify=notify) as url:
            server = url
            total = len(golden.requests) * options.repeat
            with _bar(progress_bar, f"{profile.name}", total) as tick:
                result = replay_result(url, golden, golden_name, options, copts, tick)
        doc = report_dict(result, golden=golden_name, server=server, policy=str(options.policy))
    except GoldenError as exc:
        doc = report_dict(None, golden=golden_name, server=server, policy=str(options.policy),
                          error=str(exc))
    doc["profile"] = profile.name
    doc["server_log"] = str(log_path)
    return doc


def run_matrix(golden_path: Path, profile_names: Sequence[str], options: ReplayOptions,
               copts: ClientOptions, settings: LaunchSettings, *, shard: str | None = None,
               progress_bar: ProgressBar | None = None, notify: Notify | None = None
               ) -> dict[str, Any]:
    """The matrix report document (schema: docs/ci.md). Raises only UsageError (bad profiles
    or arguments); an unreadable golden or a server failure is an `error` inside the document."""
    profiles = resolve_profiles(profile_names, settings)
    golden_name = str(golden_path)
    reports: dict[str, dict[str, Any]] = {}
    try:
        golden = load_golden(golden_path, shard)
    except UsageError:
        raise
    except GoldenError as exc:
        for p in profiles:
            reports[p.name] = report_dict(None, golden=golden_name, server=f"launch:{p.name}",
                                          policy=str(options.policy), error=str(exc))
            reports[p.name]["profile"] = p.name
        return matrix_document(golden_name, options, profiles, reports, shard)
    for p in profiles:
        if notify:
            notify(f"{p.name}: launching (log: {Path(settings.log_dir) / (p.name + '.log')})")
        reports[p.name] = replay_profile(p, golden, golden_name, options, copts, settings,
                                         progress_bar, notify)
        if notify:
            notify(f"{p.name}: {reports[p.name]['verdict']}")
    return matrix_document(golden_name, options, profiles, reports, shard)


def matrix_document(golden_name: str, options: ReplayOptions, profiles: Sequence[LaunchProfile],
                    reports: dict[str, dict[str, Any]], shard: str | None) -> dict[str, Any]:
    names = [p.name for p in profiles]
    verdicts = {n: reports[n]["verdict"] for n in names}
    return {
        "schema": SCHEMA,
        "verdict": worst_verdict(list(verdicts.values())),
        "error": None,
        "golden": golden_name,
        "policy": str(options.policy),
        "shard": shard,
        "matrix": {"profiles": names, "verdicts": verdicts, "reports": reports},
    }


def matrix_junit(doc: dict[str, Any]) -> str:
    """<testsuites> with one <testsuite> per profile (each as replay's own JUnit view)."""
    root = ET.Element("testsuites", name="golden-matrix")
    totals = {"tests": 0, "failures": 0, "errors": 0}
    for name in doc["matrix"]["profiles"]:
        suite = ET.fromstring(junit_xml(doc["matrix"]["reports"][name], suite_name=name))
        for k in totals:
            totals[k] += int(suite.get(k, "0"))
        root.append(suite)
    for k, v in totals.items():
        root.set(k, str(v))
    return ET.tostring(root, encoding="unicode", xml_declaration=True)


@contextlib.contextmanager
def _bar(progress_bar: ProgressBar | None, label: str, total: int) -> Iterator[Tick | None]:
    if progress_bar is None:
        yield None
        return
    with progress_bar(label, total) as tick:
        yield tick
