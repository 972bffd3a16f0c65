"""A control replay: which failures are the tested part's, and which the server's numerics'.

The control is a server with the same numerics as the tested one but the part under test off (a
HiCache server's radix-only twin: its profile's `control`). The same golden is replayed against
it with the same schedule, concurrency and repeats; then each failing request of the tested
replay is matched with the control's answer to the same request and repeat:
- `control_status`: the control's status for it (the vocabulary of `status`) and
  `control_passed`, so a request that also fails on the control is not the tier's (a
  decode/prefill difference of the kernels, say);
- `control_same_bits`: the control diverged too and answered with the very same bits (the
  answers' digests agree): the strongest evidence that the tier changed nothing.
Only where the control reused exactly as much (`control_cached_tokens` equal to the request's
`cached_tokens`) did it compute the same thing: where its pool evicted what the tier kept (it
reused 512 tokens where the HiCache server brought 896 back from host: seen on the H200), its
answer came from other KV and the failure is `not_comparable`, neither the tier's nor the
control's. The summary's `failed_on_tier_only` counts the comparable failures the control did
not have: the tier's alone. A control changes no verdict (docs/control.md): exit 1 still means the tested server
differs from the golden; the attribution says why.
"""

from __future__ import annotations

from typing import Any

from replay.judge.diff import IDENTICAL
from replay.report.results import CACHE_MISS, ReplayResult, RequestOutcome

TIER_ONLY = "the tier's alone"
ALSO_ON_CONTROL = "also on the control (not the tier)"
NOT_COMPARABLE = "not comparable: the control reused"


def attribute(result: ReplayResult, control: ReplayResult, label: str) -> None:
    """Mark each failing outcome of `result` with the control's answer to the same request and
    repeat, and put the control's summary in `result.control`."""
    theirs = {(o.id, o.repeat): o for o in control.outcomes}
    for o in result.failures:
        c = theirs.get((o.id, o.repeat))
        if c is None:  # the control did not answer it: nothing to attribute
            continue
        o.control_status = c.status
        o.control_passed = c.passed
        o.control_cached_tokens = c.cached_tokens
        o.control_same_bits = c.diff.status != IDENTICAL and c.answer_digest == o.answer_digest
    failed = result.failures
    comparable = [o for o in failed if o.control_cached_tokens is not None and _comparable(o)]
    result.control = {
        "server": control.server,
        "target": label,
        "verdict": "pass" if control.passed else "fail",
        "requests_failed": len(control.failures),
        "failed_on_tier_only": sum(1 for o in comparable if o.control_passed is True),
        "failed_on_control_too": sum(1 for o in comparable if o.control_passed is False),
        "not_comparable": sum(1 for o in failed if o.control_cached_tokens is not None
                              and not _comparable(o)),
        "same_bits_on_control": sum(1 for o in failed if o.control_same_bits),
        "server_meta": control.server_meta,
    }


def _comparable(o: RequestOutcome) -> bool:
    return comparable(o.status, o.cached_tokens, o.control_cached_tokens)


def comparable(status: str, cached: int, control_cached: int | None) -> bool:
    """Whether the control's answer tells about a failure: it reused as much (so it computed
    the same positions the same way), or the failure is the hit itself (a cache miss: then the
    control's own hit check is the comparison)."""
    return status == CACHE_MISS or control_cached == cached


def tier_only(request: dict[str, Any]) -> bool:
    """A failing request of a report the control answered comparably and passed."""
    return (not request["passed"] and request.get("control_passed") is True
            and comparable(request["status"], request["cached_tokens"],
                           request.get("control_cached_tokens")))


def control_note(outcome: dict[str, Any]) -> str | None:
    """How a failing request of a report with a control reads: the tier's alone, or also on the
    control (with the same bits, when they were); None without a control."""
    status = outcome.get("control_status")
    if status is None:
        return None
    theirs, ours = outcome.get("control_cached_tokens"), outcome.get("cached_tokens")
    if theirs is not None and theirs != ours and outcome.get("status") != CACHE_MISS:
        return (f"{NOT_COMPARABLE} {theirs} cached tokens, this server {ours} (the control's "
                f"answer, {status}, came from other KV)")
    if outcome.get("control_passed"):
        return TIER_ONLY
    same = ", same bits" if outcome.get("control_same_bits") else ""
    return f"{ALSO_ON_CONTROL}: {status}{same}"


def control_outcome_fields(o: RequestOutcome) -> dict[str, Any]:
    """The report's per-request control fields (only in a report with a control)."""
    return {"control_status": o.control_status, "control_passed": o.control_passed,
            "control_same_bits": o.control_same_bits,
            "control_cached_tokens": o.control_cached_tokens}
