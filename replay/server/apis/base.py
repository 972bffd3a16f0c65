"""What every server API shares: the `Api` protocol, the neutral `Completion`, strict helpers.

The recorder, replayer and diff know nothing about any API: the runner sends what `Api.request`
builds through the transport (`replay.server.transport.ServerClient`, which knows no API) and hands back
what `Api.parse` makes of the answer, a `Completion`. Parsers are strict: anything outside a
protocol's promise raises `MalformedResponse` naming the request, because a response that cannot
be read exactly must never become a verdict. Adapters state their traits as class attributes
(`expect_cache_auto`, `flush_note`, `bypasses_cache`), never as keys injected into the server's
own settings, and have optional capabilities as named protocols (`SupportsFastParse`,
`SupportsStorageClear`, `SupportsPrepare`, `SupportsResend`...), checked with isinstance.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from replay.utils.errors import MalformedResponse

if TYPE_CHECKING:
    from replay.server.transport import ServerClient


# The sampling every request uses (greedy, fixed length); stored in each golden.
SAMPLING: dict[str, Any] = {"temperature": 0, "ignore_eos": True}


@dataclass(frozen=True)
class MisreportedId:
    """A prompt token the server reported as another id than was sent (SGLang clips the
    vocabulary's last id to 0 in `input_token_logprobs`: docs/findings/sglang-ids.md)."""

    position: int  # in the input
    sent: int
    reported: int


@dataclass
class Completion:
    """One parsed answer, values exactly as sent (float64 of the server's float32)."""

    output_ids: np.ndarray  # int32 [n]
    logprobs: np.ndarray  # float64 [n]
    top_ids: np.ndarray | None  # int32 [n, k], -1 where fewer than k were sent
    top_logprobs: np.ndarray | None  # float64 [n, k], NaN where top_ids is -1
    cached_tokens: int
    cached_details: dict[str, int] = field(default_factory=dict)
    finish_reason: str = "length"
    prompt_tokens: int | None = None
    num_retractions: int = 0  # times the scheduler dropped and recomputed the request
    prompt_logprobs: np.ndarray | None = None  # float64: input tokens start+1.., when asked
    misreported_ids: tuple[MisreportedId, ...] = ()  # prompt ids reported other than sent


@runtime_checkable
class Api(Protocol):
    """What every adapter does. Optional capabilities are the `Supports*` protocols below,
    found with isinstance (never getattr): an adapter has one by defining its method."""

    name: str
    # What `--expect-cache auto` means on this API when the server says nothing itself: None to
    # decide from the server's settings (SGLang), "none" where hits cannot be judged.
    expect_cache_auto: str | None
    # How `flush_cache` empties the server's cache, recorded with each golden and report.
    flush_note: str
    # True when this adapter's own requests turn prefix reuse off (a reference through llama.cpp:
    # `cache_prompt: false`), so the answers are cache-free whatever the server's settings.
    bypasses_cache: bool

    def request(self, input_ids: np.ndarray, max_new_tokens: int, top_k: int) -> tuple[str, dict[str, Any]]:
        """The (path, JSON body) of one greedy generation with output logprobs; works on a
        fresh adapter (what it learns in `SupportsPrepare.prepare` only refines the body)."""
        ...

    def parse(self, obj: Any, request_id: str, *, max_new_tokens: int, top_k: int,
              vocab_size: int | None) -> Completion:
        """The answer, validated strictly (MalformedResponse naming the request otherwise)."""
        ...

    async def server_info(self, client: "ServerClient") -> dict[str, Any]:
        """What the server says about its settings, SGLang-style keys where they exist
        (page_size, disable_radix_cache...); never the adapter's own choices (those are traits)."""
        ...

    async def model_info(self, client: "ServerClient") -> dict[str, Any]:
        """At least `model_path` (the model's identity) and, when known, `vocab_size`."""
        ...

    async def flush_cache(self, client: "ServerClient") -> None:
        """Empty the server's prefix cache (before each replay repeat), as `flush_note` says."""
        ...


@runtime_checkable
class SupportsFastParse(Protocol):
    """The adapter reads the answer's raw JSON text itself (typed decoding, SGLang), faster than
    `parse` over a decoded object and with the same result."""

    def parse_text(self, text: str, request_id: str, *, max_new_tokens: int, top_k: int,
                   vocab_size: int | None) -> Completion:
        ...


@runtime_checkable
class SupportsStorageClear(Protocol):
    """The server may have an L3 storage tier, which a flush leaves alone (SGLang HiCache)."""

    async def clear_storage(self, client: "ServerClient", server_info: dict[str, Any]) -> bool:
        """Empty the attached storage tier; False when the server has none (nothing cleared)."""
        ...


@runtime_checkable
class SupportsPrepare(Protocol):
    """The adapter learns something from the server before the first request (the OpenAI
    adapter: the served model's id for the body's `model`); `connect` calls it once."""

    async def prepare(self, client: "ServerClient") -> None:
        ...


@runtime_checkable
class SupportsResend(Protocol):
    """The adapter can ask in another form when the server refuses a body (SGLang: nested top-k
    for a release that refuses the flat form's keys, sglang_wire.py)."""

    def refused(self, body: dict[str, Any], status: int, text: str) -> bool:
        """After `body` was refused with HTTP `status` and `text`: True when the adapter now
        builds a form the server may take (the connection rebuilds the body and sends it once
        more)."""
        ...


@dataclass(frozen=True)
class RequestExtras:
    """What a request may ask beyond a greedy generation with output logprobs: prompt logprobs
    from a position (-1: none) and a cache key the server must keep reuse apart by (SGLang's
    `extra_key`, the field its `cache_salt` is folded into)."""

    prompt_logprobs_from: int = -1
    cache_key: str | None = None

    @property
    def plain(self) -> bool:
        return self.prompt_logprobs_from < 0 and self.cache_key is None


NO_EXTRAS = RequestExtras()


@runtime_checkable
class SupportsRequestExtras(Protocol):
    """An adapter that can ask for `RequestExtras`: prompt logprobs from a position while the
    prefix before it may still come from the server's cache (SGLang: `logprob_start_len`), and a
    per-request cache key (SGLang: `extra_key`)."""

    def extras_request(self, input_ids: np.ndarray, max_new_tokens: int, top_k: int,
                       extras: RequestExtras) -> tuple[str, dict[str, Any]]:
        """The (path, body) of `request`'s generation with the extras asked."""
        ...

    def parse_prompt_logprobs(self, text: str | bytes, request_id: str, input_ids: np.ndarray,
                              start: int) -> tuple[np.ndarray, tuple[MisreportedId, ...]]:
        """The float64 logprobs of input tokens start+1 .. end read from the answer's text
        (MalformedResponse naming the request when they break the protocol), and the prompt
        tokens whose reported id is not the one sent (the server's bug, never a cache verdict)."""
        ...


@runtime_checkable
class SupportsHitSources(Protocol):
    """An adapter whose server counts cached prompt tokens by tier outside its answers (vLLM's
    /metrics): the replayer reads the counts before and after each repeat."""

    async def hit_sources(self, client: "ServerClient") -> dict[str, int]:
        """Cached prompt tokens so far, by tier (host, storage, device...), cumulative."""
        ...


def malformed(request_id: str, what: str) -> MalformedResponse:
    """The one-line error for a response that breaks the protocol, naming the request."""
    return MalformedResponse(f"request {request_id}: malformed response: {what}")


def number(value: Any, request_id: str, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise malformed(request_id, f"{where} is {_short_repr(value)}, not a number")
    try:
        return float(value)
    except OverflowError:  # an integer past float64's range
        raise malformed(request_id, f"{where} is an integer past float64's range") from None


MAX_TOKEN_ID = 2**31 - 1  # token ids are stored as int32: a larger one would wrap
MAX_COUNT = 2**31 - 1  # so are cached_tokens and the other counts of an answer


def checked_counts(completion: Completion, request_id: str) -> Completion:
    """The completion, once its counts fit a golden (int32): refused as the answer arrives,
    not when the golden is written after the whole recording."""
    counts = {"cached_tokens": completion.cached_tokens,
              "prompt_tokens": completion.prompt_tokens,
              "num_retractions": completion.num_retractions,
              **{f"cached_tokens_details.{k}": v for k, v in completion.cached_details.items()}}
    for name, value in counts.items():
        if value is not None and value > MAX_COUNT:
            raise malformed(request_id, f"{name} = {value} is past the count range [0, 2^31)")
    return completion


def token_id(value: Any, request_id: str, where: str, vocab_size: int | None) -> int:
    """An int in [0, vocab_size) (in [0, 2^31) when the server states no vocabulary), else
    MalformedResponse."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise malformed(request_id, f"{where} is {_short_repr(value)}, not a token id")
    if value < 0 or (vocab_size is not None and value >= vocab_size):
        raise malformed(request_id, f"{where} = {value} is outside the vocabulary (size {vocab_size})")
    if value > MAX_TOKEN_ID:
        raise malformed(request_id, f"{where} = {value} is outside the token id range [0, 2^31)")
    return value


def _short_repr(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."
