"""Replay one golden against several launched server configurations, one after the other.

Each profile gets its own server (started by `replay.server.launch.launched`, stopped before the next
one starts, so they never compete for the accelerator) and its own ordinary replay report. The
matrix document wraps those reports; its verdict is the worst of them (error > fail > pass). A
profile whose server cannot start is an `error` report for that profile only: the other
configurations still run and still say something. Each profile's report carries `rerun`: the
one `golden replay` command line that replays that profile alone, as the matrix did (secrets as
environment references), so a failing cell is one copy-paste from a local repro.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

from replay.server.transport import ClientOptions
from replay.utils.errors import GoldenError, UsageError
from replay.server.profile import LaunchProfile
from replay.server.target import ServerTarget
from replay.run.replayer import ReplayOptions
from replay.report.document import matrix_report, report_dict
from replay.report.views import junit_xml
from replay.jobs.minimize.repro_script import rerun_command
from replay.jobs.session import ProgressBar, load_golden, replay_golden, run_setup

Notify = Callable[[str], None]


def resolve_profiles(targets: Sequence[ServerTarget]) -> list[LaunchProfile]:
    """Every target's profile loaded and checked before any server starts: a typo or a missing
    --model must not surface after an hour of other profiles."""
    if not targets:
        raise UsageError("give at least one --launch PROFILE")
    profiles = [t.launch_profile() for t in targets]
    seen: set[str] = set()
    for p in profiles:
        if p.name in seen:
            raise UsageError(f"launch profile {p.name!r} is given twice")
        seen.add(p.name)
    return profiles


def run_matrix(golden_path: Path, targets: Sequence[ServerTarget], options: ReplayOptions,
               copts: ClientOptions, *, shard: str | None = None, api: str = "auto",
               progress: ProgressBar | None = None, notify: Notify | None = None,
               debug: bool = False) -> dict[str, Any]:
    """The matrix report document (schema: docs/ci.md): one launch target per profile. Raises
    only UsageError (bad profiles or arguments); an unreadable golden or a server failure is an
    `error` inside the document."""
    profiles = resolve_profiles(targets)
    golden_name = str(golden_path)
    reports: dict[str, dict[str, Any]] = {}
    try:
        golden = load_golden(golden_path, shard)
    except UsageError:
        raise
    except GoldenError as exc:
        for target, p in zip(targets, profiles):
            reports[p.name] = report_dict(None, golden=golden_name, server=f"launch:{p.name}",
                                          policy=str(options.policy), error=str(exc),
                                          setup=run_setup(target, options, shard,
                                                          client=copts))
            reports[p.name]["profile"] = p.name
            reports[p.name]["rerun"] = rerun_command(golden_name, target, options, copts,
                                                     api=api, shard=shard)
        return matrix_document(golden_name, options, profiles, reports, shard)
    for target, p in zip(targets, profiles):
        log_path = target.log_path(p)
        if notify:
            notify(f"{p.name}: launching (log: {log_path})")
        doc = replay_golden(golden, target, options, copts, api=api, progress=progress,
                            name=golden_name, debug=debug)
        doc["profile"] = p.name
        doc["server_log"] = str(log_path)
        doc["rerun"] = rerun_command(golden_name, target, options, copts, api=api, shard=shard)
        reports[p.name] = doc
        if notify:
            notify(f"{p.name}: {doc['verdict']}")
    return matrix_document(golden_name, options, profiles, reports, shard)


def matrix_document(golden_name: str, options: ReplayOptions, profiles: Sequence[LaunchProfile],
                    reports: dict[str, dict[str, Any]], shard: str | None) -> dict[str, Any]:
    return matrix_report({p.name: reports[p.name] for p in profiles}, golden=golden_name,
                         policy=str(options.policy), shard=shard)


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
