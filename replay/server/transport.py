"""The transport: one async HTTP client per server with its session, slots, timeouts and retries.

It knows no API (httpx's rule): adapters in `replay.server.apis` decide paths and bodies and read the
answers; this module only moves JSON and bytes.

Retries happen only where a retry cannot change the measurement: the request never reached the
server (connection refused / DNS / connect timeout) or the server declined it before doing any
work (HTTP 429, 503). A 5xx, a reset mid-body or a read timeout is an error, never retried: the
server may have run the request and changed its cache. `/flush_cache` answering 400 (requests
still draining) is retried briefly. So that an idle pooled connection is never one the server is
closing at that moment (its request lost, "Server disconnected": the keep-alive race, most likely
where the client's loop is slow to see the close), a connection idle for `keepalive` seconds is not
reused: 3 s, below the 5 s of uvicorn (SGLang, vLLM) and cpp-httplib (llama.cpp).

Hostile answers are bounded (docs/reliability.md): redirects are never followed (the server
whose model was checked and whose cache was flushed must be the one that answers); a body is
read only up to what the request can need (`max_bytes`, from the caller; 16 MiB for settings),
so a huge or endless answer is an error, not an exhausted memory; a body that is not UTF-8 JSON,
nests too deeply or holds absurd numbers is a MalformedResponse. The URL's credentials and the
API key never appear in anything this module hands on (`url` is the printable form; answers and
error texts are scrubbed of the secret values).
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass
from types import TracebackType
from typing import Any, ClassVar
from urllib.parse import urlsplit

import aiohttp

from replay.utils.errors import MalformedResponse, RefusedRequest, ServerError, UsageError
from replay.server.jsonio import decode as _decode
from replay.server.jsonio import encode as _encode
from replay.utils.redact import redact_text, scrub, scrub_values, url_secrets

RETRYABLE_STATUS = {429, 503}
SETTINGS_MAX_BYTES = 16 * 2**20  # /server_info, /model_info, error bodies: far beyond any real one


@dataclass(frozen=True)
class ClientOptions:
    """How the client talks to a server. `FLAGS` are the fields a user sets, one command-line
    flag each (cli/options.py CLIENT_FLAGS declares each once; the pytest plugin takes each as a
    keyword named like its flag; `client_argv` writes them back for repro.sh and a matrix's rerun
    line, the secrets only as their `SECRET_ENV` variables); `FIXED` are tuning with fixed
    defaults. tests/unit/run/test_client_target_parity.py fails on a field in neither."""

    FLAGS: ClassVar[dict[str, str]] = {
        "concurrency": "--concurrency", "request_timeout": "--timeout", "api_key": "--api-key",
        "admin_api_key": "--admin-api-key"}
    SECRET_ENV: ClassVar[dict[str, str]] = {"api_key": "GOLDEN_API_KEY",
                                            "admin_api_key": "GOLDEN_ADMIN_API_KEY"}
    FIXED: ClassVar[tuple[str, ...]] = ("connect_timeout", "retries", "backoff", "flush_wait",
                                        "keepalive")

    concurrency: int = 16  # requests in flight at once
    connect_timeout: float = 10.0  # seconds to open a connection
    request_timeout: float = 900.0  # seconds for one whole request, body included
    retries: int = 3  # extra attempts for retryable failures
    backoff: float = 0.5  # seconds, doubled per attempt
    flush_wait: float = 30.0  # seconds to keep retrying /flush_cache while busy
    keepalive: float = 3.0  # seconds an idle connection may be reused: below servers' (module doc)
    api_key: str | None = None  # sent as a Bearer token, never logged
    admin_api_key: str | None = None  # for admin endpoints (SGLang's --admin-api-key), never logged

    def __post_init__(self) -> None:
        if isinstance(self.concurrency, bool) or not isinstance(self.concurrency, int) \
                or self.concurrency < 1:
            raise UsageError("--concurrency must be >= 1")
        for name in ("connect_timeout", "request_timeout", "flush_wait", "backoff", "keepalive"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0 \
                    or (value == 0 and name != "backoff"):
                flag = "--timeout" if name == "request_timeout" else name
                raise UsageError(f"{flag} must be a finite number of seconds > 0, not {value!r}")
        if isinstance(self.retries, bool) or not isinstance(self.retries, int) or self.retries < 0:
            raise UsageError("retries must be >= 0")


def client_argv(options: ClientOptions) -> list[str]:
    """The options as `golden` command-line words, every flag but the secrets (which a rerun
    reads from their variables, `ClientOptions.SECRET_ENV`)."""
    return [word for name, flag in ClientOptions.FLAGS.items()
            if name not in ClientOptions.SECRET_ENV for word in (flag, str(getattr(options, name)))]


def url_has_credentials(url: str) -> bool:
    """Whether the URL names a user (`scheme://user[:password]@host`): HTTP Basic auth."""
    try:
        return urlsplit(url).username is not None
    except ValueError:
        return False


class ServerClient:
    """Use as `async with ServerClient(url, options) as client:`; it owns the session, the pool,
    timeouts and retries."""

    def __init__(self, url: str, options: ClientOptions | None = None) -> None:
        self._base = url.rstrip("/")  # with credentials, for requests only
        self.url = redact_text(self._base)  # for messages and metadata
        self.options = options or ClientOptions()
        if self.options.api_key and url_has_credentials(url):
            raise UsageError(f"--server {self.url} carries credentials (user:password@) and "
                             "--api-key is given too: one request has one Authorization header; "
                             "use one of them")
        self.secrets = tuple(s for s in (self.options.api_key, self.options.admin_api_key,
                                         *url_secrets(url)) if s)
        self._session: aiohttp.ClientSession | None = None
        self._slots = asyncio.Semaphore(self.options.concurrency)

    async def __aenter__(self) -> "ServerClient":
        timeout = aiohttp.ClientTimeout(
            total=self.options.request_timeout, sock_connect=self.options.connect_timeout
        )
        headers = {}
        if self.options.api_key:
            headers["Authorization"] = f"Bearer {self.options.api_key}"
        connector = aiohttp.TCPConnector(limit=self.options.concurrency,
                                         keepalive_timeout=self.options.keepalive)
        self._session = aiohttp.ClientSession(
            timeout=timeout, headers=headers, connector=connector, json_serialize=_encode
        )
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def scrub(self, text: str) -> str:
        """The text without this client's secret values (API key, URL password)."""
        return scrub(text, self.secrets)

    async def post(self, path: str, body: dict[str, Any], request_id: str,
                   max_bytes: int = SETTINGS_MAX_BYTES) -> Any:
        """One generation-style POST within the concurrency bound; the decoded JSON answer
        (an answer longer than `max_bytes` is an error)."""
        return _decode(await self.post_text(path, body, request_id, max_bytes),
                       f"request {request_id}")

    async def post_text(self, path: str, body: dict[str, Any], request_id: str,
                        max_bytes: int = SETTINGS_MAX_BYTES) -> bytes:
        """Like `post`, but the answer's bytes, undecoded (for adapters that decode it typed)."""
        async with self._slots:
            status, data = await self._exchange("POST", path, f"request {request_id}", body,
                                                max_bytes, headers=request_id_header(request_id))
        if status != 200:
            text = self._text(data)
            raise RefusedRequest(f"request {request_id}: {self.url}{path} answered HTTP {status}: "
                                 f"{text}{auth_hint(status)}", status, text)
        return data

    async def get_json(self, path: str, fallback: str | None = None) -> dict[str, Any]:
        """GET a JSON object (trying `fallback` on 404: older servers' names), scrubbed of the
        secret values."""
        status, data = await self._exchange("GET", path, path)
        if status == 404 and fallback:
            status, data = await self._exchange("GET", fallback, fallback)
        if status != 200:
            raise ServerError(f"{self.url}{path} answered HTTP {status}: {self._text(data)}"
                              f"{auth_hint(status)}")
        obj = _decode(data, path)
        if not isinstance(obj, dict):
            raise MalformedResponse(f"{path}: expected a JSON object")
        return scrub_values(obj, self.secrets)

    async def post_until_idle(self, path: str, body: Any = None) -> None:
        """POST that the server refuses with 400 while requests drain: retried briefly."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.options.flush_wait
        while True:
            status, text = await self.raw("POST", path, path, body)
            if status == 200:
                return
            if status != 400 or loop.time() >= deadline:
                raise ServerError(f"{self.url}{path} answered HTTP {status}: {_short(text)}")
            await asyncio.sleep(0.2)

    async def raw(
        self, method: str, path: str, what: str, body: Any = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, str]:
        """One exchange: the status and the body as text (scrubbed of the secret values)."""
        status, data = await self._exchange(method, path, what, body, headers=headers)
        return status, self.scrub(data.decode("utf-8", errors="replace"))

    def _text(self, data: bytes) -> str:
        return _short(self.scrub(data.decode("utf-8", errors="replace")))

    async def _exchange(self, method: str, path: str, what: str, body: Any = None,
                        max_bytes: int = SETTINGS_MAX_BYTES,
                        headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        """One exchange, with retries only where the server did no work."""
        assert self._session is not None, "use ServerClient as an async context manager"
        delay = self.options.backoff
        for attempt in range(self.options.retries + 1):
            last = attempt == self.options.retries
            try:
                async with self._session.request(method, self._base + path, json=body,
                                                 headers=headers, allow_redirects=False) as resp:
                    if 300 <= resp.status < 400:
                        raise ServerError(self._redirect_message(what, path, resp))
                    data = await self._read_bounded(resp, what, max_bytes)
                    if resp.status in RETRYABLE_STATUS and not last:
                        await asyncio.sleep(delay)
                        delay *= 2
                        continue
                    return resp.status, data
            except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError) as exc:
                if last:
                    raise ServerError(_unreachable(self.url, exc)) from None
                await asyncio.sleep(delay)
                delay *= 2
            except asyncio.TimeoutError:
                raise ServerError(
                    f"{what}: no complete answer from {self.url} within "
                    f"{self.options.request_timeout:g} s"
                ) from None
            except aiohttp.ClientError as exc:
                raise ServerError(f"{what}: connection to {self.url} failed: {_reason(exc)}") from None
        raise AssertionError("unreachable")

    def _redirect_message(self, what: str, path: str, resp: aiohttp.ClientResponse) -> str:
        location = redact_text(self.scrub(resp.headers.get("Location", "(no Location)")))
        return (f"{what}: {self.url}{path} answered HTTP {resp.status}, a redirect to "
                f"{_short(location)}; redirects are not followed (the server checked must be "
                "the one that answers)")

    async def _read_bounded(self, resp: aiohttp.ClientResponse, what: str, limit: int) -> bytes:
        """The body, or ServerError as soon as it is known to exceed `limit` bytes."""
        too_big = (f"{what}: the answer from {self.url} exceeds {limit} bytes, more than the "
                   "request can need; stopped reading")
        declared = resp.content_length
        if declared is not None and declared > limit:
            raise ServerError(too_big)
        if declared is not None and resp.headers.get("Content-Encoding", "identity") == "identity":
            return await resp.read()  # the common case: aiohttp stops at the declared length
        chunks, total = [], 0  # chunked or compressed (a small body may inflate): count it
        async for chunk in resp.content.iter_any():
            total += len(chunk)
            if total > limit:
                raise ServerError(too_big)
            chunks.append(chunk)
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def request_id_header(request_id: str) -> dict[str, str]:
    """`X-Request-Id: <id>` on every generation: a router logs which worker got which id (the
    standard header, which servers and routers that do not use it ignore)."""
    safe = "".join(c if 32 < ord(c) < 127 else "_" for c in request_id)[:128]
    return {"X-Request-Id": safe}


def auth_hint(status: int) -> str:
    """What a 401/403 means for the user, appended to the error line."""
    if status in (401, 403):
        return " (the server wants an API key: pass --api-key or set GOLDEN_API_KEY)"
    return ""


def _short(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "..."


def _unreachable(url: str, exc: BaseException) -> str:
    """One line for a server that cannot be reached: the URL, why in words (not aiohttp's
    `Cannot connect to host ... ssl:default [...]`), and for a refused connection the likely
    cause and its remedy."""
    os_error = exc.os_error if isinstance(exc, aiohttp.ClientConnectorError) else None
    if isinstance(os_error, ConnectionRefusedError):
        return (f"cannot connect to {url}: connection refused (is a server running there? "
                "--launch PROFILE starts one: see golden profiles)")
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return f"cannot connect to {url}: no connection within the timeout"
    reason = os_error.strerror if isinstance(os_error, OSError) and os_error.strerror else None
    return f"cannot connect to {url}: {reason or _reason(exc)}"


def _reason(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__
