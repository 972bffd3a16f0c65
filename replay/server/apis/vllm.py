"""vLLM's OpenAI server (`--api vllm`): `POST /v1/completions` plus what vLLM says about itself.

Requests and answers are the OpenAI adapter's (token-id prompt, `return_tokens_as_token_ids`, the
classic logprobs shape, `usage.prompt_tokens_details.cached_tokens` with
`--enable-prompt-tokens-details`). What this adapter adds, each from vLLM 0.32's own endpoints
(docs/apis.md, "vLLM"):

- **A cache-free reference on any server**: vLLM ignores `cache_prompt`; its per-request switch is
  `cache_salt`, which goes into the hash of every block. A recording sends a fresh random salt
  with each request, so no request can hit a block another request left, whatever the server's
  flags. A replay sends none.
- **Server facts** for `--expect-cache`, the numerics-parity check and the report:
  `GET /server_info?config_format=json` (the whole resolved VllmConfig; answered only with
  `VLLM_SERVER_DEV_MODE=1`), else the `vllm:cache_config_info` labels of `GET /metrics` (always
  there): block size, prefix caching on/off, KV cache dtype. Nothing known means nothing claimed.
- **The flush** between repeats: `POST /reset_prefix_cache` (dev mode), with `reset_external=true`
  when a KV connector is configured (that is how a connector tier is cleared, where the
  connector implements it: no separate storage step); `{"success": false}` is retried.
- **Per-source hit counts** for `--require-tier`: the counter
  `vllm:prompt_tokens_cached_by_source_total{source=...}` of `/metrics`, read before and after
  each repeat (`SupportsHitSources`).
- **The vocabulary**: `/v1/models` gives none; the served model's `config.json` (the entry's
  `root` folder, when this machine can read it) does.
"""

from __future__ import annotations

import asyncio
import json
import re
import secrets
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from replay.server.apis.base import Completion
from replay.server.apis.openai import OpenAIApi
from replay.server.apis.openai_style import first_model
from replay.utils.errors import MalformedResponse, ServerError

if TYPE_CHECKING:
    from replay.server.transport import ServerClient

FLUSH_NOTE = ("POST /reset_prefix_cache (reset_external=true with a KV connector); vLLM answers "
              "it only with VLLM_SERVER_DEV_MODE=1, otherwise nothing is flushed and a repeat may "
              "start warm")
# vLLM's cache-hit sources (vllm/v1/metrics/cache_hit_source.py) -> the tool's tiers
# (--require-tier host|storage|device): a connector that does not say where its hits came from
# counts as external_unspecified, i.e. beyond the device and host memory.
SOURCE_TIERS = {"device": "device", "host": "host", "disk": "storage", "p2p": "storage",
                "external_unspecified": "storage"}
FLUSH_TRIES = 20
FLUSH_WAIT = 0.25  # seconds between tries while blocks are still held
_LABELS = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


class VllmApi:
    name = "vllm"
    flush_note = FLUSH_NOTE

    def __init__(self, *, reference: bool = False) -> None:
        self.reference = reference
        # A reference salts every request, so its answers are cache-free whatever the server's
        # settings (the recorder then gives no radix-cache warning).
        self.bypasses_cache = reference
        self.openai = OpenAIApi()  # request shape and strict parser (no llama.cpp switch)
        # Decided by server_info (which runs first): from the server's settings, or "none" when
        # the server says nothing about its cache (no rule the tool could check).
        self.expect_cache_auto: str | None = None
        self.reset_external = False
        self.dev_mode = False

    def request(self, input_ids: np.ndarray, max_new_tokens: int, top_k: int) -> tuple[str, dict[str, Any]]:
        path, body = self.openai.request(input_ids, max_new_tokens, top_k)
        if self.reference:
            body["cache_salt"] = "golden-ref-" + secrets.token_hex(8)
        return path, body

    def parse(self, obj: Any, request_id: str, *, max_new_tokens: int, top_k: int,
              vocab_size: int | None) -> Completion:
        return self.openai.parse(obj, request_id, max_new_tokens=max_new_tokens, top_k=top_k,
                                 vocab_size=vocab_size)

    async def server_info(self, client: "ServerClient") -> dict[str, Any]:
        status, text = await client.raw("GET", "/server_info?config_format=json", "/server_info")
        config = _vllm_config(text) if status == 200 else None
        if config is not None:
            self.dev_mode = True
            info = facts_from_config(config, _json_object(text).get("vllm_env"))
        else:
            info = facts_from_metrics(await _metrics(client))
        version = await _version(client)
        if version:
            info["vllm_version"] = version
        self.reset_external = bool(info.get("kv_connector"))
        self.expect_cache_auto = None if "disable_radix_cache" in info and "page_size" in info else "none"
        return info

    async def prepare(self, client: "ServerClient") -> None:
        """Learn the served model's id for the body's `model` (as the OpenAI adapter does)."""
        await self.openai.prepare(client)

    async def model_info(self, client: "ServerClient") -> dict[str, Any]:
        info = await self.openai.model_info(client)
        model = await first_model(client)
        root = model.get("root") if isinstance(model, dict) else None
        if isinstance(model, dict) and isinstance(model.get("max_model_len"), int):
            info["max_model_len"] = model["max_model_len"]
        vocab = config_vocab_size(root) if isinstance(root, str) else None
        if vocab is not None:
            info["vocab_size"] = vocab
        return info

    async def flush_cache(self, client: "ServerClient") -> None:
        """Empty the prefix cache (and a connector's, when there is one); nothing when the
        server runs without dev mode (the flush note says so)."""
        path = "/reset_prefix_cache" + ("?reset_external=true" if self.reset_external else "")
        for _ in range(FLUSH_TRIES):
            status, text = await client.raw("POST", path, path)
            if status == 404:
                return  # not in dev mode: no flush endpoint
            if status != 200:
                raise ServerError(f"{client.url}{path} answered HTTP {status}: {text[:200]}")
            if _json_object(text).get("success") is True:
                return
            await asyncio.sleep(FLUSH_WAIT)  # blocks still held by finishing requests
        raise ServerError(f"{client.url}{path} kept answering success=false "
                          f"({FLUSH_TRIES} tries): the prefix cache could not be reset")

    async def hit_sources(self, client: "ServerClient") -> dict[str, int]:
        """Cached prompt tokens so far, by tier (cumulative since the server started)."""
        tiers: dict[str, int] = {}
        for labels, value in _samples(await _metrics(client), "vllm:prompt_tokens_cached_by_source_total"):
            tier = SOURCE_TIERS.get(labels.get("source", ""), labels.get("source", "unknown"))
            tiers[tier] = tiers.get(tier, 0) + int(value)
        return tiers


# ---------------------------------------------------------------------------------------------
# Server facts, SGLang-style keys where they mean the same (replay/judge/numerics.py)
# ---------------------------------------------------------------------------------------------


def facts_from_config(config: dict[str, Any], env: Any) -> dict[str, Any]:
    """The settings that decide the cache expectation and the numerics, from vLLM's resolved
    configuration (`/server_info?config_format=json`)."""
    model, cache = _section(config, "model_config"), _section(config, "cache_config")
    sched, par = _section(config, "scheduler_config"), _section(config, "parallel_config")
    compilation = _section(config, "compilation_config")
    kv_transfer = config.get("kv_transfer_config")
    env = env if isinstance(env, dict) else {}
    chunked = sched.get("enable_chunked_prefill")
    info: dict[str, Any] = {
        "model_path": model.get("model"),
        "device": _section(config, "device_config").get("device"),
        "dtype": _dtype(model.get("dtype")),
        "kv_cache_dtype": cache.get("cache_dtype"),
        "quantization": model.get("quantization"),
        "tp_size": par.get("tensor_parallel_size"),
        "pp_size": par.get("pipeline_parallel_size"),
        "dp_size": par.get("data_parallel_size"),
        "page_size": cache.get("block_size"),
        # vLLM splits a prompt into chunks of at most max_num_batched_tokens (less the tokens of
        # other requests in the same step): what the chunk boundaries, so the numerics, depend on.
        "chunked_prefill_size": sched.get("max_num_batched_tokens") if chunked else None,
        "max_num_seqs": sched.get("max_num_seqs"),
        "enable_deterministic_inference": env.get("VLLM_BATCH_INVARIANT"),
        "attention_backend": _section(config, "attention_config").get("backend"),
        "mamba_backend": _section(config, "mamba_config").get("backend"),
        "mamba_ssm_dtype": cache.get("mamba_ssm_cache_dtype"),
        "enable_torch_compile": not model.get("enforce_eager") and compilation.get("mode") not in (0, None),
        "enable_prefix_caching": cache.get("enable_prefix_caching"),
        "disable_radix_cache": not cache.get("enable_prefix_caching"),
        "mamba_cache_mode": cache.get("mamba_cache_mode"),
        "kv_offloading_size": cache.get("kv_offloading_size"),
        "kv_connector": kv_transfer.get("kv_connector") if isinstance(kv_transfer, dict) else None,
        "seed": model.get("seed"),
    }
    hybrid = cache.get("mamba_cache_mode") not in (None, "none")
    if hybrid:  # prefix caching of a hybrid keeps SSM states at block boundaries ("align")
        info["uses_mamba_radix_cache"] = True
        info["mamba_track_interval"] = cache.get("block_size")
    return info


def facts_from_metrics(text: str) -> dict[str, Any]:
    """What `/metrics` says without dev mode: the `vllm:cache_config_info` labels."""
    samples = _samples(text, "vllm:cache_config_info")
    if not samples:
        return {}
    labels = samples[0][0]
    info: dict[str, Any] = {}
    block = labels.get("block_size", "")
    if block.isdigit():
        info["page_size"] = int(block)
    if labels.get("enable_prefix_caching") in ("True", "False"):
        info["enable_prefix_caching"] = labels["enable_prefix_caching"] == "True"
        info["disable_radix_cache"] = not info["enable_prefix_caching"]
    if labels.get("cache_dtype"):
        info["kv_cache_dtype"] = labels["cache_dtype"]
    mode = labels.get("mamba_cache_mode")
    if mode and mode != "none" and "page_size" in info:
        info["uses_mamba_radix_cache"] = True
        info["mamba_track_interval"] = info["page_size"]
    return info


def config_vocab_size(root: str) -> int | None:
    """`vocab_size` from the served model's config.json (a text model's, or its `text_config`'s),
    None when the folder is not on this machine or says nothing."""
    path = Path(root) / "config.json"
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    for section in (config, config.get("text_config") if isinstance(config, dict) else None):
        if isinstance(section, dict):
            v = section.get("vocab_size")
            if isinstance(v, int) and not isinstance(v, bool) and v > 0:
                return v
    return None


def is_vllm_server_info(text: str) -> bool:
    """Whether a `/server_info` answer is vLLM's (dev mode), not SGLang's."""
    return isinstance(_json_object(text).get("vllm_config"), (dict, str))


def is_vllm_models(text: str) -> bool:
    """Whether a `/v1/models` answer is vLLM's (its entries are `owned_by: vllm`)."""
    data = _json_object(text).get("data")
    return isinstance(data, list) and any(isinstance(m, dict) and m.get("owned_by") == "vllm"
                                          for m in data)


def _vllm_config(text: str) -> dict[str, Any] | None:
    config = _json_object(text).get("vllm_config")
    return config if isinstance(config, dict) else None


def _section(config: dict[str, Any], key: str) -> dict[str, Any]:
    value = config.get(key)
    return value if isinstance(value, dict) else {}


def _dtype(value: Any) -> Any:
    """`torch.bfloat16` -> `bfloat16` (SGLang's spelling)."""
    return value.removeprefix("torch.") if isinstance(value, str) else value


def _json_object(text: str) -> dict[str, Any]:
    try:
        obj = json.loads(text)
    except ValueError:
        return {}
    return obj if isinstance(obj, dict) else {}


async def _metrics(client: "ServerClient") -> str:
    status, text = await client.raw("GET", "/metrics", "/metrics")
    return text if status == 200 else ""


async def _version(client: "ServerClient") -> str | None:
    status, text = await client.raw("GET", "/version", "/version")
    version = _json_object(text).get("version") if status == 200 else None
    return version if isinstance(version, str) else None


def _samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    """The (labels, value) of each sample of one metric in a Prometheus text page."""
    found = []
    for line in text.splitlines():
        if not line.startswith(name + "{"):
            continue
        labels_text, _, rest = line[len(name) + 1:].rpartition("}")
        try:
            value = float(rest.split()[0])
        except (IndexError, ValueError):
            raise MalformedResponse(f"/metrics: unreadable sample {line[:120]!r}") from None
        found.append(({k: v for k, v in _LABELS.findall(labels_text)}, value))
    return found
