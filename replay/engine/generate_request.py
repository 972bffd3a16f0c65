"""What SGLang's POST /generate body may hold, checked: `parse_generate` turns a body into one
`GenerateArgs` per request, or a `BadRequest` (a 400) naming the field.

Strictly: a field SGLang would accept but this engine cannot honour (text, streaming, penalties,
stop strings) is refused, never silently ignored, because a golden recorded under a misunderstood
request is worthless. Fields SGLang itself does not know are ignored, as SGLang does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from replay.engine.sampling import GREEDY, SamplingParams

# /generate fields this engine honours; SGLang 0.5.23's other GenerateRequest fields are refused
# unless they hold their default; fields SGLang does not know are ignored, as SGLang does.
REQUEST_KEYS = ("input_ids", "sampling_params", "return_logprob", "logprob_start_len",
                "top_logprobs_num", "return_text_in_logprobs", "extra_key",
                "return_flat_raw_output_top_logprobs", "return_flat_raw_top_logprobs_b64")
SGLANG_REQUEST_KEYS = frozenset((
    "rid", "text", "input_ids", "stream", "sampling_params", "return_logprob",
    "logprob_start_len", "top_logprobs_num", "token_ids_logprob", "return_hidden_states",
    "return_text_in_logprobs", "bootstrap_host", "bootstrap_port", "bootstrap_room",
    "bootstrap_pair_key", "decode_tp_size", "routed_dp_rank", "disagg_prefill_dp_rank",
    "image_data", "mm_hashes", "video_data", "audio_data", "extra_key", "priority", "cache_salt",
    "require_reasoning", "lora_path", "session_params", "kv_hints", "routing_key",
    "max_thinking_tokens", "session_id", "custom_logit_processor", "custom_labels",
    "images_config", "return_prompt_token_ids", "routed_experts_start_len",
    "return_sampling_mask", "modalities"))
SAMPLING_KEYS = ("temperature", "top_p", "top_k", "min_p", "sampling_seed", "max_new_tokens",
                 "ignore_eos")
# Sampling fields accepted only at the value that changes nothing (e.g. a client that always
# sends explicit neutral penalties).
NEUTRAL_SAMPLING = {"frequency_penalty": 0, "presence_penalty": 0, "repetition_penalty": 1,
                    "min_new_tokens": 0, "n": 1}
SGLANG_SAMPLING_KEYS = frozenset((
    "max_new_tokens", "stop", "stop_token_ids", "stop_regex", "temperature", "top_p", "top_k",
    "min_p", "frequency_penalty", "presence_penalty", "repetition_penalty", "min_new_tokens", "n",
    "json_schema", "regex", "ebnf", "structural_tag", "ignore_eos", "skip_special_tokens",
    "spaces_between_special_tokens", "no_stop_trim", "stream_interval", "logit_bias",
    "sampling_seed", "custom_params", "beam_width", "watermark", "choice"))
DEFAULT_MAX_NEW_TOKENS = 128  # SGLang's default


class BadRequest(ValueError):
    pass


@dataclass(frozen=True)
class GenerateArgs:
    input_ids: list[int]
    max_new_tokens: int
    return_logprob: bool
    top_logprobs_num: int
    sampling: SamplingParams = GREEDY
    logprob_start_len: int = -1  # -1 unless return_logprob asks for prompt logprobs
    flat_top: bool = False  # return_flat_raw_output_top_logprobs
    flat_b64: bool = False  # return_flat_raw_top_logprobs_b64
    extra_key: str | None = None  # SGLang's extra cache key: reuse only between equal keys


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _token_list(value: Any, where: str) -> list[int]:
    if not isinstance(value, list) or not value or not all(_is_int(t) for t in value):
        raise BadRequest(f"{where} must be a non-empty list of token ids")
    return value


def _per_request(body: dict[str, Any], key: str, n: int, batched: bool, default: Any) -> list[Any]:
    value = body.get(key)
    if value is None:
        value = default
    if batched and isinstance(value, list):
        if len(value) != n:
            raise BadRequest(f"{key} has {len(value)} entries for {n} requests")
        return [default if v is None else v for v in value]
    return [value] * n


def _number(params: dict[str, Any], key: str, default: float) -> float:
    value = params.get(key)
    if value is None:
        return default
    if not _is_number(value):
        raise BadRequest(f"sampling_params.{key} must be a number")
    return float(value)


def _integer(params: dict[str, Any], key: str, default: int | None) -> int | None:
    value = params.get(key)
    if value is None:
        return default
    if not _is_int(value):
        raise BadRequest(f"sampling_params.{key} must be an integer")
    return value


def _sampling(params: Any) -> tuple[SamplingParams, int]:
    """Validate one sampling_params dict; returns the sampling fields and max_new_tokens."""
    params = {} if params is None else params
    if not isinstance(params, dict):
        raise BadRequest("sampling_params must be an object")
    unknown = sorted(set(params) - SGLANG_SAMPLING_KEYS)
    if unknown:
        raise BadRequest(f"unknown field `{unknown[0]}` in sampling_params")
    for key in sorted(set(params) - set(SAMPLING_KEYS)):
        value = params[key]
        if value is None or (key in NEUTRAL_SAMPLING and _is_number(value)
                             and value == NEUTRAL_SAMPLING[key]):
            continue
        raise BadRequest(f"unsupported sampling_params {key} (the embedded engine takes "
                         f"{', '.join(SAMPLING_KEYS)}, and {', '.join(NEUTRAL_SAMPLING)} at their "
                         "neutral values)")
    if not isinstance(params.get("ignore_eos", True), (bool, type(None))):
        raise BadRequest("ignore_eos must be a boolean")
    max_new = _integer(params, "max_new_tokens", DEFAULT_MAX_NEW_TOKENS)
    if max_new < 0:
        raise BadRequest("max_new_tokens must be an integer >= 0")
    try:
        sampling = SamplingParams(
            temperature=_number(params, "temperature", 1.0),
            top_p=_number(params, "top_p", 1.0),
            top_k=_integer(params, "top_k", -1),
            min_p=_number(params, "min_p", 0.0),
            sampling_seed=_integer(params, "sampling_seed", None),
        )
    except ValueError as exc:
        raise BadRequest(str(exc)) from None
    return sampling, max_new


def parse_generate(body: Any) -> tuple[list[GenerateArgs], bool]:
    """The requests in a /generate body and whether it was batched; BadRequest if invalid."""
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    unsupported = sorted(k for k in set(body) & SGLANG_REQUEST_KEYS - set(REQUEST_KEYS)
                         if body[k] not in (None, False, [], {}))
    if unsupported:
        raise BadRequest(f"unsupported field(s) {', '.join(unsupported)} "
                         f"(the embedded engine takes {', '.join(REQUEST_KEYS)})")
    ids = body.get("input_ids")
    batched = isinstance(ids, list) and bool(ids) and isinstance(ids[0], list)
    prompts = ([_token_list(p, f"input_ids[{i}]") for i, p in enumerate(ids)] if batched
               else [_token_list(ids, "input_ids")])
    n = len(prompts)
    sampling = _per_request(body, "sampling_params", n, batched, None)
    want_logprob = _per_request(body, "return_logprob", n, batched, False)
    start_len = _per_request(body, "logprob_start_len", n, batched, -1)
    top_num = _per_request(body, "top_logprobs_num", n, batched, 0)
    extra_keys = _per_request(body, "extra_key", n, batched, None)
    for key in ("return_text_in_logprobs", "return_flat_raw_output_top_logprobs",
                "return_flat_raw_top_logprobs_b64"):
        if not isinstance(body.get(key, False), (bool, type(None))):
            raise BadRequest(f"{key} must be a boolean")
    flat = bool(body.get("return_flat_raw_output_top_logprobs"))
    flat_b64 = bool(body.get("return_flat_raw_top_logprobs_b64"))
    if flat_b64 and not flat:  # SGLang's own rule (io_struct.py)
        raise BadRequest("return_flat_raw_top_logprobs_b64 requires "
                         "return_flat_raw_output_top_logprobs")
    requests = []
    for i in range(n):
        if not isinstance(want_logprob[i], bool):
            raise BadRequest("return_logprob must be a boolean")
        if not _is_int(start_len[i]) or start_len[i] < -1:
            raise BadRequest("logprob_start_len must be an integer >= -1")
        if not _is_int(top_num[i]) or top_num[i] < 0:
            raise BadRequest("top_logprobs_num must be an integer >= 0")
        if extra_keys[i] is not None and not isinstance(extra_keys[i], str):
            raise BadRequest("extra_key must be a string")
        params, max_new = _sampling(sampling[i])
        requests.append(GenerateArgs(prompts[i], max_new, want_logprob[i], top_num[i], params,
                                     start_len[i] if want_logprob[i] else -1, flat, flat_b64,
                                     extra_keys[i]))
    return requests, batched
