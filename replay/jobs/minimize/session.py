"""`golden minimize` as a library call: a failing replay in, the smallest repro out.

`minimize_golden` starts the server once (a URL, or a launch profile kept up for the whole
search), establishes what "fails the same way" means (`Failure`: a failure class, from the failing
report or a first replay), lets `replay.jobs.minimize.search.Search` reduce the replay, judging each candidate
by replaying its sub-golden through the session layer (`replay_golden` flushes the cache before
each repeat, so every candidate starts from an empty cache), and writes the output directory:
`golden.zarr` (the sub-golden), `report.json` (its failing replay), `repro.sh` and
`minimize.json` (docs/minimize.md).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from replay.server.transport import ClientOptions, client_argv
from replay.utils.errors import GoldenError, UsageError
from replay.golden.model import Golden, subset_golden
from replay.golden.store import read_golden, write_golden
from replay.jobs.minimize.search import Budget, Candidate, Judgement, NotFailing, Progress, Result, Search
from replay.run.replayer import ReplayOptions, replay_argv
from replay.report.document import SCHEMA as REPORT_SCHEMA
from replay.report.files import json_text, write_atomic
from replay.jobs.minimize.output import MARKER, staged_out_dir
from replay.jobs.minimize.repro_script import repro_sh, script_secrets
from replay.jobs.session import known_secrets, replay_golden
from replay.utils.redact import scrubbed_errors
from replay.server.target import ServerTarget

SCHEMA = "golden-replay/minimize/1"
# The failure classes, most telling first (ties in the count go to the earlier one).
FAILURE_CLASSES = ("token_divergence", "logprob_drift", "prompt_logprob_drift", "over_reported",
                   "cache_miss", "tier")
HOST_TIERS = ("host", "storage")


def request_class(r: dict[str, Any]) -> str | None:
    """The failure class of one request of a report (None when it passed)."""
    if r["passed"]:
        return None
    if r["status"] == "cache_miss" and "over-reported" in (r.get("cache_problem") or ""):
        return "over_reported"
    return str(r["status"])


def failure_counts(report: dict[str, Any]) -> Counter[str]:
    counts = Counter(c for r in report.get("requests") or [] if (c := request_class(r)))
    if report.get("tier_problem"):
        counts["tier"] += 1
    return counts


@dataclass(frozen=True)
class Failure:
    """What "fails the same way" means: a failing request of this class, and, when `tiers` is
    given, one whose cache hit came (partly) through one of these tiers."""

    kind: str
    tiers: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in FAILURE_CLASSES:
            raise UsageError(f"invalid --failure {self.kind!r}: use one of "
                             f"{', '.join(FAILURE_CLASSES)}")

    def __str__(self) -> str:
        return self.kind + (f" (through the {'/'.join(self.tiers)} tier)" if self.tiers else "")

    def matching(self, report: dict[str, Any]) -> list[dict[str, Any]]:
        """The requests of `report` that fail this way (for `tier`: a stand-in entry)."""
        if self.kind == "tier":
            return [{"id": "-", "repeat": 0}] if report.get("tier_problem") else []
        return [r for r in report.get("requests") or [] if request_class(r) == self.kind
                and (not self.tiers or any(r["cached_tokens_details"].get(t, 0) > 0
                                           for t in self.tiers))]

    @classmethod
    def of(cls, report: dict[str, Any], kind: str | None = None,
           same_tier: bool = False) -> "Failure":
        """The failure `report` shows: the given class, else its most frequent one."""
        if report.get("verdict") == "error":
            raise GoldenError(f"the starting replay ended in an error: {report.get('error')}")
        if report.get("verdict") != "fail":
            raise NotFailing("the starting replay passed: there is no failure to minimize")
        counts = failure_counts(report)
        if kind is None:
            kind = max(FAILURE_CLASSES, key=lambda c: (counts[c], -FAILURE_CLASSES.index(c)))
        elif counts[kind] == 0:
            seen = ", ".join(f"{k} {v}" for k, v in counts.most_common())
            raise NotFailing(f"the starting replay shows no {kind} failure (it shows: {seen})")
        tiers: tuple[str, ...] = ()
        if same_tier and kind != "tier":
            found = {t for r in cls(kind).matching(report)
                     for t, n in r["cached_tokens_details"].items() if n > 0}
            tiers = tuple(t for t in HOST_TIERS if t in found) or (("device",) if found else ())
        return cls(kind, tiers)


@dataclass(frozen=True)
class MinimizeSettings:
    """Everything that shapes the search besides the golden and the server."""

    # Every replay option; its schedule and repeats are the search's start (repeats per judgement).
    options: ReplayOptions = ReplayOptions()
    client: ClientOptions = ClientOptions()  # the starting concurrency
    api: str = "auto"
    failure: str | None = None  # a class of FAILURE_CLASSES; None: the start's most frequent
    same_tier: bool = False
    budget: Budget = Budget()


def read_failing_report(path: Path, golden: Golden) -> dict[str, Any]:
    """A report (docs/report.md) of a replay of `golden`, or a UsageError saying why not."""
    try:
        report = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise UsageError(f"--report {path}: cannot read a JSON report ({exc})") from None
    if not isinstance(report, dict) or report.get("schema") != REPORT_SCHEMA:
        raise UsageError(f"--report {path}: not a golden-replay report ({REPORT_SCHEMA})")
    ids = {r.id for r in golden.requests}
    unknown = sorted({r["id"] for r in report.get("requests") or []} - ids)
    if unknown:
        raise UsageError(f"--report {path}: request {unknown[0]} is not in the golden (a report "
                         "of another golden?)")
    return report


def minimize_golden(golden_path: Path, target: ServerTarget, out: Path,
                    settings: MinimizeSettings = MinimizeSettings(), *,
                    report: Path | None = None, force: bool = False,
                    progress: Progress | None = None) -> Result:
    """Minimize the failing replay of `golden_path` against `target`; write `out`."""
    out_abs, logs_abs = Path(out).absolute(), Path(target.log_dir).absolute()
    if target.profile is not None and (logs_abs == out_abs or out_abs in logs_abs.parents):
        raise UsageError(f"--log-dir {target.log_dir} is inside --out {out}: the output directory "
                         "is published whole at the end; put the server's log elsewhere")
    golden = read_golden(golden_path)
    failing = read_failing_report(report, golden) if report else None
    say = progress or (lambda line: None)
    started, first = time.monotonic(), 0
    with scrubbed_errors(known_secrets(settings.client, target)), \
            staged_out_dir(out, force) as staging, target.serving(settings.client.api_key) as url:
        server = ServerTarget(url=url)
        if failing is None:
            first = 1
            say(f"replaying the whole golden ({len(golden.requests)} requests) once to see how "
                "it fails")
            failing = replay_golden(golden, server, settings.options, settings.client,
                                    api=settings.api, name=str(golden_path))
        failure = Failure.of(failing, settings.failure, settings.same_tier)
        say(f"minimizing: a replay fails the same way when it shows {failure}")
        judge = CandidateJudge(golden, server, failure, settings, str(golden_path))
        start = Candidate(keep=tuple(range(len(golden.requests))),
                          schedule=settings.options.schedule,
                          concurrency=settings.client.concurrency,
                          repeat=settings.options.repeat)
        result = Search(golden.requests, judge, settings.budget, progress).run(start)
        write_outputs(staging, golden, golden_path, target, settings, failure, result,
                      seconds=time.monotonic() - started, replays=result.replays + first)
    return result


class CandidateJudge:
    """Replays a candidate's sub-golden against the running server and classifies the result."""

    def __init__(self, golden: Golden, server: ServerTarget, failure: Failure,
                 settings: MinimizeSettings, name: str) -> None:
        self.golden, self.server, self.failure = golden, server, failure
        self.settings, self.name = settings, name

    def __call__(self, cand: Candidate) -> Judgement:
        sub = subset_golden(self.golden, cand.keep)
        options = replace(self.settings.options, schedule=cand.schedule, repeat=cand.repeat)
        client = replace(self.settings.client, concurrency=cand.concurrency)
        t0 = time.monotonic()
        doc = replay_golden(sub, self.server, options, client, api=self.settings.api,
                            name=f"{self.name} ({len(cand.keep)} requests)")
        if doc["verdict"] == "error":
            raise GoldenError(f"a candidate replay ended in an error: {doc['error']}")
        same = self.failure.matching(doc)
        repeats = cand.repeat if self.failure.kind == "tier" else len({r["repeat"] for r in same})
        return Judgement(fails=bool(same), failed_repeats=repeats if same else 0,
                         failing=tuple(sorted({r["id"] for r in same})),
                         seconds=time.monotonic() - t0, report=doc)


# ---------------------------------------------------------------------------------------------
# The output directory
# ---------------------------------------------------------------------------------------------


def write_outputs(out: Path, golden: Golden, golden_path: Path, target: ServerTarget,
                  settings: MinimizeSettings, failure: Failure, result: Result, *,
                  seconds: float, replays: int) -> None:
    """Into `out` (the staging directory, published whole afterwards): the sub-golden, the
    final rerun's report, the record and, only when the rerun reproduced the failure, repro.sh."""
    sub = subset_golden(golden, result.final.keep, minimized={
        "from": str(golden_path), "of_requests": len(golden.requests),
        "requests": len(result.final.keep), "failure": str(failure)})
    write_golden(sub, out / "golden.zarr")
    report = result.rerun.report or result.judgement.report
    if report is not None:
        write_atomic(out / "report.json", json_text(report))
    if result.reproduced:
        write_atomic(out / "repro.sh",
                     repro_script(target, settings, result, failure, requests=golden.requests),
                     mode=0o755)
    doc = minimize_record(golden, golden_path, target, settings, failure, result, seconds,
                          replays)
    write_atomic(out / MARKER, json_text(doc))


def candidate_dict(golden: Golden, cand: Candidate) -> dict[str, Any]:
    convs = {(golden.requests[i].group, golden.requests[i].branch) for i in cand.keep}
    return {"requests": len(cand.keep), "conversations": len(convs), "schedule": cand.schedule,
            "concurrency": cand.concurrency, "repeat": cand.repeat}


def minimize_record(golden: Golden, golden_path: Path, target: ServerTarget,
                    settings: MinimizeSettings, failure: Failure, result: Result,
                    seconds: float, replays: int) -> dict[str, Any]:
    """minimize.json: where it started, each step, where it ended, and the verdict."""
    j = result.judgement
    return {
        "schema": SCHEMA,
        "golden": str(golden_path),
        "server": target.label,
        "api": settings.api,
        "policy": str(settings.options.policy),
        "failure": {"class": failure.kind, "tiers": list(failure.tiers) or None},
        "start": candidate_dict(golden, result.start),
        "result": {**candidate_dict(golden, result.final),
                   "request_ids": [golden.requests[i].id for i in result.final.keep],
                   "failing": list(j.failing), "failed_repeats": j.failed_repeats,
                   "flaky": result.flaky},
        "rerun": {"fails": result.rerun.fails, "failed_repeats": result.rerun.failed_repeats,
                  "failing": list(result.rerun.failing)},
        "steps": [s.to_dict() for s in result.steps],
        "replays": replays,  # including the first replay of the whole golden, when run
        "seconds": round(seconds, 3),
        "one_minimal": result.one_minimal,
        "budget_exhausted": result.budget_exhausted,
        "reproduced": result.reproduced,
        "verdict": result.verdict,
    }


def kept_words(requests: Sequence[Any], keep: Sequence[int], failing: Sequence[str]) -> str:
    """What the kept requests are, in words: the failing ones, their ancestors (a follow-up needs
    its history) and the rest, pressure requests kept because the failure needs them evicting the
    cache (`requests`: the golden's, each with `id` and `parent`)."""
    failed = [i for i in keep if requests[i].id in set(failing)]
    ancestors: set[int] = set()
    for i in failed:
        p = requests[i].parent
        while p >= 0 and p not in ancestors:
            ancestors.add(p)
            p = requests[p].parent
    ancestors -= set(failed)
    pressure = len(keep) - len(failed) - len(ancestors)
    words = [f"{len(failed)} failing request{'s' if len(failed) != 1 else ''}"]
    words += [f"{len(ancestors)} ancestor{'s' if len(ancestors) != 1 else ''} (the history "
              f"{'they follow' if len(failed) != 1 else 'it follows'})"] if ancestors else []
    words += [f"{pressure} pressure request{'s' if pressure != 1 else ''} (kept to evict the "
              "cache)"] if pressure else []
    return ", ".join(words)


def repro_script(target: ServerTarget, settings: MinimizeSettings, result: Result,
                 failure: Failure, *, requests: Sequence[Any] = ()) -> str:
    """repro.sh (replay/jobs/minimize/repro_script.py): `repro.sh [SERVER_URL] [OPTIONS...]`."""
    c = result.final
    final = replace(settings.options, schedule=c.schedule, repeat=c.repeat)
    client = replace(settings.client, concurrency=c.concurrency)
    options = ["--api", settings.api, *replay_argv(final), *client_argv(client)]
    flaky = (f" (flaky: it failed in {result.judgement.failed_repeats} of {c.repeat} repeats)"
             if result.flaky else "")
    kept = f": {kept_words(requests, c.keep, result.judgement.failing)}" if requests else ""
    return repro_sh(target.argv(), options, secrets=script_secrets(target, settings.client),
                    summary=f"Reruns the minimized replay ({failure}{flaky}) of {len(c.keep)} "
                            f"request(s){kept}.")
