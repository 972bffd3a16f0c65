"""Server APIs: the adapter chosen by name (`get_api`) or by asking the server (`detect_api`).

The adapter interface and the neutral `Completion` live in `replay.server.apis.base`; each adapter is
one module. A golden records which API produced it (`meta.api`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from replay.utils.errors import UsageError

if TYPE_CHECKING:
    from replay.server.apis.base import Api
    from replay.server.transport import ServerClient

API_NAMES = ("sglang", "openai", "llamacpp", "vllm")


def check_api_name(name: str) -> str:
    """`auto` or a known adapter name, else UsageError."""
    if name != "auto" and name not in API_NAMES:
        raise UsageError(f"unknown --api {name!r} (choose from auto, {', '.join(API_NAMES)})")
    return name


def get_api(name: str, *, reference: bool = False) -> "Api":
    """The adapter for `name`. `reference` is true when recording a reference: adapters whose
    server takes a per-request cache switch (llama.cpp's `cache_prompt`) then turn reuse off, so
    the reference is cache-free whatever the server's flags (docs/apis.md)."""
    if name == "sglang":
        from replay.server.apis.sglang import SGLangApi

        return SGLangApi()
    if name == "openai":
        from replay.server.apis.openai import OpenAIApi

        return OpenAIApi(reference=reference)
    if name == "llamacpp":
        from replay.server.apis.llamacpp import LlamaCppApi

        return LlamaCppApi(cache_prompt=not reference)
    if name == "vllm":
        from replay.server.apis.vllm import VllmApi

        return VllmApi(reference=reference)
    check_api_name(name)
    raise UsageError("--api auto must be resolved with detect_api first")


async def detect_api(client: "ServerClient") -> str:
    """Which API the server speaks: SGLang answers /server_info (so does vLLM in dev mode, with a
    `vllm_config`), llama.cpp /props, vLLM /v1/models with `owned_by: vllm`, and any other
    OpenAI-compatible server /v1/models."""
    from replay.server.apis.vllm import is_vllm_models, is_vllm_server_info

    refused = None
    for path, name in (("/server_info", "sglang"), ("/get_server_info", "sglang"),
                       ("/props", "llamacpp"), ("/v1/models", "openai")):
        status, text = await client.raw("GET", path, "detect api")
        if status == 200:
            if path == "/server_info" and is_vllm_server_info(text):
                return "vllm"
            if path == "/v1/models" and is_vllm_models(text):
                return "vllm"
            return name
        if status in (401, 403):
            refused = status
    if refused is not None:
        from replay.server.transport import auth_hint
        from replay.utils.errors import ServerError

        raise ServerError(f"{client.url} answered HTTP {refused}{auth_hint(refused)}")
    raise UsageError(f"{client.url} answers none of /server_info, /props, /v1/models: "
                     "pass --api sglang|openai|llamacpp|vllm")


async def resolve_api(client: "ServerClient", name: str, *, reference: bool = False) -> "Api":
    """The adapter for `name`, asking the server first when `name` is `auto`."""
    check_api_name(name)
    return get_api(await detect_api(client) if name == "auto" else name, reference=reference)
