"""A replay's request entries: each request's JSON form, made when it is read.

The `requests` array is most of a report: an entry of ~20 keys per request and repeat. Held as
dicts beside the outcomes they came from, a replay of 32k requests kept ~15 MB more than the
outcomes alone, and it grew with every request. `RequestEntries` keeps the outcomes (slotted
records) and makes entry i (`outcome_dict`, the one definition of an entry; schema in
docs/report.md) each time it is read, so a replay's document holds what its judgement held and
no more. To every reader it is a sequence of dicts like the list a report file loads as;
`replay.report.files` writes it one entry at a time.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any, overload

from replay.judge.diff import IDENTICAL
from replay.report.control import control_outcome_fields
from replay.report.results import RequestOutcome
from replay.utils.bits import ULP_INFINITE, hex_bits

DETAIL_POSITIONS = 4096  # per-position arrays kept for a non-identical request
MISREPORTED_SHOWN = 8  # prompt ids reported other than sent, shown per request


def json_number(x: float) -> float | str | None:
    """JSON has no NaN/inf: write them as strings rather than produce invalid JSON."""
    if x is None:
        return None
    if math.isnan(x) or math.isinf(x):
        return str(x)
    return x


def json_ulp(u: int) -> int | str:
    return "inf" if u >= ULP_INFINITE else int(u)


def outcome_dict(o: RequestOutcome, with_control: bool = False) -> dict[str, Any]:
    d = o.diff
    first = None
    if d.first is not None:
        f = d.first
        first = {
            "position": f.position, "kind": f.kind,
            "golden_token": f.golden_token, "replay_token": f.replay_token,
            "golden_logprob": json_number(f.golden_logprob),
            "replay_logprob": json_number(f.replay_logprob),
            "golden_bits": hex_bits(f.golden_logprob), "replay_bits": hex_bits(f.replay_logprob),
            "ulp": json_ulp(f.ulp),
        }
    out: dict[str, Any] = {
        "id": o.id, "repeat": o.repeat, "status": o.status, "passed": o.passed,
        "cached_tokens": o.cached_tokens, "cached_tokens_details": dict(o.cached_details),
        "expected_min_cached": o.expected_min_cached, "cache_problem": o.cache_problem,
        "num_retractions": o.num_retractions, "retraction_lag": o.retraction_lag,
        "tokens_compared": d.compared, "max_ulp": json_ulp(d.max_ulp),
        "mean_kl": json_number(d.mean_kl),
        "first_divergence": first,
        "token_divergence_position": d.token_position,
        "prompt_logprobs": _prompt(o),
        "answer_sha256": o.answer_digest.hex() or None,
    }
    if o.misreported_ids:  # the server's bug, not a verdict (docs/findings/sglang-ids.md)
        out["misreported_prompt_ids"] = {
            "count": len(o.misreported_ids),
            "first": [{"position": m.position, "sent": m.sent, "reported": m.reported}
                      for m in o.misreported_ids[:MISREPORTED_SHOWN]]}
    if with_control:  # a report with a control replay (docs/control.md)
        out.update(control_outcome_fields(o))
    if o.worker is not None:  # replayed through a router (docs/topologies.md)
        out["worker"] = o.worker
        out["routing_note"] = o.routing_note
    if o.prefill_worker is not None:  # through a PD router: both halves (docs/topologies.md)
        out["prefill_worker"], out["decode_worker"] = o.prefill_worker, o.decode_worker
        out["routing_note"] = o.routing_note
    if d.status != IDENTICAL:
        n = min(DETAIL_POSITIONS, len(d.abs_delta))
        out["detail"] = {
            "abs_delta": [json_number(float(x)) for x in d.abs_delta[:n]],
            "ulp": [json_ulp(int(x)) for x in d.ulp[:n]],
            "top_k": _clean_top(o.top),
        }
    return out


def _prompt(o: RequestOutcome) -> dict[str, Any] | None:
    p = o.prompt
    if p is None:
        return None
    return {
        "compared": p.compared, "identical": p.identical, "passed": p.passed,
        "first_position": p.first_position,
        "golden_logprob": None if p.identical else json_number(p.golden_logprob),
        "replay_logprob": None if p.identical else json_number(p.replay_logprob),
        "golden_bits": None if p.identical else hex_bits(p.golden_logprob),
        "replay_bits": None if p.identical else hex_bits(p.replay_logprob),
        "ulp": json_ulp(p.ulp), "max_ulp": json_ulp(p.max_ulp),
        "mean_kl": json_number(p.mean_kl),
    }


def _clean_top(top: dict[str, Any] | None) -> dict[str, Any] | None:
    if top is None:
        return None
    return {
        "position": top["position"],
        "golden": [[t, json_number(v)] for t, v in top["golden"]],
        "replay": [[t, json_number(v)] for t, v in top["replay"]],
    }


class RequestEntries(Sequence[dict[str, Any]]):
    """The entries of `outcomes`, in their order, each made when read (a fresh dict: changing
    one changes nothing here). Equal to any sequence of the same entries, a list included."""

    def __init__(self, outcomes: Sequence[RequestOutcome], *, with_control: bool = False) -> None:
        self.outcomes = outcomes
        self.with_control = with_control

    def __len__(self) -> int:
        return len(self.outcomes)

    @overload
    def __getitem__(self, i: int) -> dict[str, Any]: ...

    @overload
    def __getitem__(self, i: slice) -> list[dict[str, Any]]: ...

    def __getitem__(self, i: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        if isinstance(i, slice):
            return [outcome_dict(o, self.with_control) for o in self.outcomes[i]]
        return outcome_dict(self.outcomes[i], self.with_control)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for o in self.outcomes:
            yield outcome_dict(o, self.with_control)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, (str, bytes)):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"RequestEntries({len(self)} requests)"
