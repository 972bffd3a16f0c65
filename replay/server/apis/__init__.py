"""Server APIs: the adapter chosen by name (`get_api`) or by asking the server (`detect_api`).

`ADAPTERS` is the one table of them (as the engine's `FAULTS` is of faults): each entry's name,
how it is built, and the probes that recognize its server.
`--api`'s choices, every help text naming them, `get_api` and `detect_api` all read it; the
adapter conformance suite (tests/unit/server/apis/conformance.py) fails when a registered adapter
has no subclass of it. Adding an API: docs/architecture.md, "Where a change goes".

The adapter interface and the neutral `Completion` live in `replay.server.apis.base`; each adapter
is one module, imported only when it is built. A golden records which API produced it
(`meta.api`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from replay.utils.errors import UsageError

if TYPE_CHECKING:
    from replay.server.apis.base import Api
    from replay.server.transport import ServerClient


@dataclass(frozen=True)
class Probe:
    """A server of this API answers `GET path` with 200 (and, with `matches`, a text it
    accepts: a probe with one is more specific than a plain 200 on the same path)."""

    path: str
    matches: Callable[[str], bool] | None = None


@dataclass(frozen=True)
class Adapter:
    name: str  # the --api value, `Api.name`, a golden's meta.api
    build: Callable[[bool], "Api"]  # reference -> the adapter (reference: see `get_api`)
    probes: tuple[Probe, ...]  # how detect_api recognizes the server


def _sglang(reference: bool) -> "Api":
    from replay.server.apis.sglang import SGLangApi

    return SGLangApi()


def _llamacpp(reference: bool) -> "Api":
    from replay.server.apis.llamacpp import LlamaCppApi

    return LlamaCppApi(cache_prompt=not reference)


def _vllm(reference: bool) -> "Api":
    from replay.server.apis.vllm import VllmApi

    return VllmApi(reference=reference)


def _openai(reference: bool) -> "Api":
    from replay.server.apis.openai import OpenAIApi

    return OpenAIApi(reference=reference)


def _vllm_server_info(text: str) -> bool:
    from replay.server.apis.vllm import is_vllm_server_info

    return is_vllm_server_info(text)


def _vllm_models(text: str) -> bool:
    from replay.server.apis.vllm import is_vllm_models

    return is_vllm_models(text)


# In detection order: each probe's path is asked once, in the order it first appears here, and
# on a 200 the most specific probe of that path wins (vLLM's dev mode answers SGLang's
# /server_info too, llama.cpp and vLLM answer /v1/models); the generic OpenAI adapter comes last.
ADAPTERS: tuple[Adapter, ...] = (
    Adapter("sglang", _sglang, (Probe("/server_info"), Probe("/get_server_info"))),
    Adapter("llamacpp", _llamacpp, (Probe("/props"),)),
    Adapter("vllm", _vllm, (Probe("/server_info", _vllm_server_info),
                            Probe("/v1/models", _vllm_models))),
    Adapter("openai", _openai, (Probe("/v1/models"),)),
)
API_NAMES = tuple(a.name for a in ADAPTERS)
API_CHOICES = ("auto", *API_NAMES)


def api_help() -> str:
    """`--api`'s help text (the CLI's and the pytest plugin's)."""
    return f"{' | '.join(API_CHOICES)} (auto: ask the server)."


def check_api_name(name: str) -> str:
    """`auto` or a known adapter name, else UsageError."""
    if name not in API_CHOICES:
        raise UsageError(f"unknown --api {name!r} (choose from {', '.join(API_CHOICES)})")
    return name


def get_api(name: str, *, reference: bool = False) -> "Api":
    """The adapter for `name`. `reference` is true when recording a reference: adapters whose
    server takes a per-request cache switch (llama.cpp's `cache_prompt`, vLLM's `cache_salt`)
    then turn reuse off, so the reference is cache-free whatever the server's flags
    (docs/apis.md)."""
    for adapter in ADAPTERS:
        if adapter.name == name:
            return adapter.build(reference)
    check_api_name(name)
    raise UsageError("--api auto must be resolved with detect_api first")


async def detect_api(client: "ServerClient") -> str:
    """Which API the server speaks, by the table's probes (see `ADAPTERS`)."""
    paths = list(dict.fromkeys(p.path for a in ADAPTERS for p in a.probes))
    refused = None
    for path in paths:
        status, text = await client.raw("GET", path, "detect api")
        if status == 200:
            probes = [(a.name, p) for a in ADAPTERS for p in a.probes if p.path == path]
            specific = [n for n, p in probes if p.matches is not None and p.matches(text)]
            plain = [n for n, p in probes if p.matches is None]
            if specific or plain:
                return (specific or plain)[0]
        if status in (401, 403):
            refused = status
    if refused is not None:
        from replay.server.transport import auth_hint
        from replay.utils.errors import ServerError

        raise ServerError(f"{client.url} answered HTTP {refused}{auth_hint(refused)}")
    raise UsageError(f"{client.url} answers none of {', '.join(paths)}: "
                     f"pass --api {'|'.join(API_NAMES)}")


async def resolve_api(client: "ServerClient", name: str, *, reference: bool = False) -> "Api":
    """The adapter for `name`, asking the server first when `name` is `auto`."""
    check_api_name(name)
    return get_api(await detect_api(client) if name == "auto" else name, reference=reference)
