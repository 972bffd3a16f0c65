"""One request's progress through SGLang's output stream, and the BatchTokenIDOutput of a step.

Mirrors SGLang 0.5.23's `scheduler_components/output_streamer.py`, which is what the
DetokenizerManager and TokenizerManager expect: a request is sent when it finishes, every
`stream_interval` tokens when streaming (the first token at once), and otherwise every
SGLANG_FORCE_STREAM_INTERVAL (50) tokens; each chunk carries only what is new (token ids, logprobs)
and the detokenizer's `decode_ids` start with the last <= 5 prompt tokens on the first chunk.
Prompt logprobs go once, in the first chunk (the prefill is done by then), in the engine's own
server's form: `[None] + logprobs` for the prompt tokens from `logprob_start_len` (nothing before
the first one was scored), top-k rows the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sglang.srt.managers.io_struct import BatchTokenIDOutput
from sglang.srt.utils.weight_versions import compute_weight_version_spans

from replay.engine.faults import Faults
from replay.engine.radix_nodes import CachedTokens
from replay.engine.sequence import Sequence

SURROUNDING_PROMPT_TOKENS = 5  # SGLang's INIT_INCREMENTAL_DETOKENIZATION_OFFSET


@dataclass(eq=False)
class Tracked:
    """A TokenizedGenerateReqInput being served by one engine sequence."""

    rid: str
    http_worker_ipc: str | None
    seq: Sequence
    return_logprob: bool
    top_logprobs_num: int
    stream: bool
    stream_interval: int
    skip_special_tokens: bool
    spaces_between_special_tokens: bool
    no_stop_trim: bool
    sent_tokens: int = 0  # output tokens already sent
    sent_decode_ids: bool = False  # the first chunk (with prompt context) went out
    sent_input_logprobs: bool = False  # prompt logprobs (first chunk only) went out
    abort: dict[str, Any] | None = None  # finish reason of an abort waiting to be sent
    done: bool = False  # its finishing chunk went out

    @property
    def finished(self) -> bool:
        return self.abort is not None or self.seq.finished

    def finish_reason(self) -> dict[str, Any] | None:
        if self.abort is not None:
            return self.abort
        if self.seq.finished:
            return {"type": "length", "length": self.seq.max_new_tokens}
        return None

    def should_output(self, force_interval: int) -> bool:
        if self.done:
            return False
        if self.finished:
            return True
        produced = len(self.seq.output_ids)
        if self.stream:
            unsent = produced - self.sent_tokens
            return unsent > 0 and (self.stream_interval == 1 or unsent >= self.stream_interval
                                   or self.sent_tokens == 0)
        return produced > 0 and produced % force_interval == 0 and produced > self.sent_tokens


PROMPT_FIELDS = ("input_token_logprobs_val", "input_token_logprobs_idx", "input_top_logprobs_val",
                 "input_top_logprobs_idx")
EMPTY_PROMPT: tuple[list, list, list, list] = ([], [], [], [])


def prompt_logprobs(r: Tracked) -> tuple[list, list, list, list]:
    """The request's prompt logprobs as PROMPT_FIELDS (empty when none were asked)."""
    seq = r.seq
    if not (r.return_logprob and seq.wants_prompt_logprobs):
        return EMPTY_PROMPT
    ids = list(seq.input_ids[seq.logprob_start_len:])
    if r.top_logprobs_num <= 0:
        return [None, *seq.input_logprobs], ids, [], []
    return ([None, *seq.input_logprobs], ids, [None, *(list(v) for _, v in seq.input_top)],
            [None, *(list(i) for i, _ in seq.input_top)])


def cached_details(tiers: CachedTokens, cached: int, hierarchical: bool,
                   storage_backend: str | None) -> dict[str, Any] | None:
    """SGLang's get_cached_tokens_details: None when nothing was cached."""
    if hierarchical and (tiers.device or tiers.host or tiers.storage):
        details: dict[str, Any] = {"device": tiers.device, "host": tiers.host}
        if tiers.storage or storage_backend:
            details["storage"] = tiers.storage
        if storage_backend:
            details["storage_backend"] = storage_backend
        return details
    if cached > 0:
        return {"device": cached, "host": 0}
    return None


class StepOutputBuilder:
    """Collects the chunks of one step into one BatchTokenIDOutput (as the real streamer does)."""

    def __init__(self, faults: Faults, hierarchical: bool, storage_backend: str | None,
                 weight_version: str) -> None:
        self.faults = faults
        self.hierarchical = hierarchical
        self.storage_backend = storage_backend
        self.weight_version = weight_version

    def build(self, reqs: list[Tracked]) -> BatchTokenIDOutput | None:
        if not reqs:
            return None
        any_logprob = any(r.return_logprob for r in reqs)
        f: dict[str, list] = {name: [] for name in (
            "rids", "http_worker_ipcs", "finished_reasons", "decoded_texts", "decode_ids",
            "read_offsets", "output_ids", "skip_special_tokens", "spaces_between_special_tokens",
            "no_stop_trim", "prompt_tokens", "reasoning_tokens", "completion_tokens",
            "cached_tokens", "cached_tokens_details", "image_tokens", "audio_tokens",
            "video_tokens", "retraction_counts", "weight_versions")}
        lp: dict[str, list] = {name: [] for name in (
            "input_token_logprobs_val", "input_token_logprobs_idx", "output_token_logprobs_val",
            "output_token_logprobs_idx", "input_top_logprobs_val", "input_top_logprobs_idx",
            "output_top_logprobs_val", "output_top_logprobs_idx", "input_token_ids_logprobs_val",
            "input_token_ids_logprobs_idx", "output_token_ids_logprobs_val",
            "output_token_ids_logprobs_idx")}
        for r in reqs:
            seq = r.seq
            start, end = r.sent_tokens, len(seq.output_ids)
            new_ids = list(seq.output_ids[start:end])
            f["rids"].append(r.rid)
            f["http_worker_ipcs"].append(r.http_worker_ipc)
            f["finished_reasons"].append(r.finish_reason())
            f["decoded_texts"].append("")
            surrounding = min(SURROUNDING_PROMPT_TOKENS, seq.prompt_len)
            if r.sent_decode_ids:
                f["decode_ids"].append(new_ids)
            else:
                f["decode_ids"].append(seq.input_ids[seq.prompt_len - surrounding:] + new_ids)
                r.sent_decode_ids = True
            f["read_offsets"].append(surrounding)
            f["output_ids"].append(new_ids)
            f["skip_special_tokens"].append(r.skip_special_tokens)
            f["spaces_between_special_tokens"].append(r.spaces_between_special_tokens)
            f["no_stop_trim"].append(r.no_stop_trim)
            f["prompt_tokens"].append(seq.prompt_len)
            f["reasoning_tokens"].append(0)
            f["completion_tokens"].append(end)
            tiers = seq.cached or CachedTokens()
            cached = self.faults.reported_cached(tiers.total, seq.prompt_len)
            f["cached_tokens"].append(cached)
            f["cached_tokens_details"].append(
                cached_details(tiers, cached, self.hierarchical, self.storage_backend))
            for name in ("image_tokens", "audio_tokens", "video_tokens"):
                f[name].append(0)
            f["retraction_counts"].append(0)  # the engine reserves pages up front: never retracts
            f["weight_versions"].append(
                compute_weight_version_spans([], self.weight_version, end) if r.finished else None)
            if any_logprob:
                for name in ("input_token_ids_logprobs_val", "input_token_ids_logprobs_idx",
                             "output_token_ids_logprobs_val", "output_token_ids_logprobs_idx"):
                    lp[name].append([])
                prompt = prompt_logprobs(r) if not r.sent_input_logprobs else EMPTY_PROMPT
                r.sent_input_logprobs = True
                for name, values in zip(PROMPT_FIELDS, prompt):
                    lp[name].append(values)
                if r.return_logprob:
                    lp["output_token_logprobs_val"].append(list(seq.output_logprobs[start:end]))
                    lp["output_token_logprobs_idx"].append(new_ids)
                    tops = seq.output_top[start:end] if r.top_logprobs_num > 0 else []
                    lp["output_top_logprobs_val"].append([list(v) for _, v in tops])
                    lp["output_top_logprobs_idx"].append([list(i) for i, _ in tops])
                else:
                    for name in ("output_token_logprobs_val", "output_token_logprobs_idx",
                                 "output_top_logprobs_val", "output_top_logprobs_idx"):
                        lp[name].append([])
            r.sent_tokens = end
            r.done = r.finished
        weight_versions = f.pop("weight_versions")
        none_if_no_logprob = {name: (values if any_logprob else None) for name, values in lp.items()}
        return BatchTokenIDOutput(
            **f,
            **none_if_no_logprob,
            output_token_entropy_val=None,
            output_token_sampling_mask=None,
            output_hidden_states=None,
            routed_experts=None,
            indexer_topk=None,
            placeholder_tokens_idx=None,
            placeholder_tokens_val=None,
            weight_versions=weight_versions if any(weight_versions) else None,
            spec_verify_ct=[], spec_num_correct_drafts=[], spec_num_block_accept_tokens=[],
            spec_num_cap_tokens=[], spec_correct_drafts_histogram=[], spec_cap_lens_histogram=[],
            time_stats=None,
            customized_info=None,
            beam_search_output=None,
            dp_ranks=[0] * len(reqs),
        )
