"""The transport: one async HTTP client per server with its session, slots, timeouts and retries.

It knows no API (httpx's rule): adapters in `replay.apis` decide paths and bodies and read the
answers; this module only moves JSON and bytes.

Retries happen only where a retry cannot change the measurement: the request never reached the
server (connection refused / DNS / connect timeout) or the server declined it before doing any
work (HTTP 429, 503). A 5xx, a reset mid-body or a read timeout is an error, never retried: the
server may have run the request and changed its cache. `/flush_cache` answering 400 (requests
still draining) is retried briefly.
"""

from __future__ import annotations

import asyncio
import json
import math
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import aiohttp

from replay.errors import MalformedResponse, ServerError, UsageError

RETRYABLE_STATUS = {429, 503}


@dataclass(frozen=True)
class ClientOptions:
    concurrency: int = 16  # requests in flight at once
    connect_timeout: float = 10.0  # seconds to open a connection
    request_timeout: float = 900.0  # seconds for one whole request, body included
    retries: int = 3  # extra attempts for retryable failures
    backoff: float = 0.5  # seconds, doubled per attempt
    flush_wait: float = 30.0  # seconds to keep retrying /flush_cache while busy
    api_key: str | None = None  # sent as a Bearer token, never logged
    admin_api_key: str | None = None  # for admin endpoints (SGLang's --admin-api-key), never logged

    def __post_init__(self) -> None:
        if isinstance(self.concurrency, bool) or not isinstance(self.concurrency, int) \
                or self.concurrency < 1:
            raise UsageError("--concurrency must be >= 1")
        for name in ("connect_timeout", "request_timeout", "flush_wait", "backoff"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0 \
                    or (value == 0 and name != "backoff"):
                flag = "--timeout" if name == "request_timeout" else name
                raise UsageError(f"{flag} must be a finite number of seconds > 0, not {value!r}")
        if isinstance(self.retries, bool) or not isinstance(self.retries, int) or self.retries < 0:
            raise UsageError("retries must be >= 0")


class ServerClient:
    """Use as `async with ServerClient(url, options) as client:`; it owns the session, the pool,
    timeouts and retries."""

    def __init__(self, url: str, options: ClientOptions | None = None) -> None:
        self.url = url.rstrip("/")
        self.options = options or ClientOptions()
        self._session: aiohttp.ClientSession | None = None
        self._slots = asyncio.Semaphore(self.options.concurrency)

    async def __aenter__(self) -> "ServerClient":
        timeout = aiohttp.ClientTimeout(
            total=self.options.request_timeout, sock_connect=self.options.connect_timeout
        )
        headers = {}
        if self.options.api_key:
            headers["Authorization"] = f"Bearer {self.options.api_key}"
        connector = aiohttp.TCPConnector(limit=self.options.concurrency)
        self._session = aiohttp.ClientSession(
            timeout=timeout, headers=headers, connector=connector, json_serialize=json.dumps
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

    async def post(self, path: str, body: dict[str, Any], request_id: str) -> Any:
        """One generation-style POST within the concurrency bound; the decoded JSON answer."""
        async with self._slots:
            return await self._call("POST", path, request_id, body=body)

    async def get_json(self, path: str, fallback: str | None = None) -> dict[str, Any]:
        """GET a JSON object (trying `fallback` on 404: older servers' names)."""
        status, text = await self.raw("GET", path, path)
        if status == 404 and fallback:
            status, text = await self.raw("GET", fallback, fallback)
        if status != 200:
            raise ServerError(f"{self.url}{path} answered HTTP {status}: {_short(text)}"
                              f"{auth_hint(status)}")
        data = _decode(text, path)
        if not isinstance(data, dict):
            raise MalformedResponse(f"{path}: expected a JSON object")
        return data

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

    async def _call(self, method: str, path: str, request_id: str, body: Any = None) -> Any:
        status, text = await self.raw(method, path, request_id, body)
        if status != 200:
            raise ServerError(
                f"request {request_id}: {self.url}{path} answered HTTP {status}: {_short(text)}"
                f"{auth_hint(status)}"
            )
        return _decode(text, f"request {request_id}")

    async def raw(
        self, method: str, path: str, what: str, body: Any = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, str]:
        """One exchange, with retries only where the server did no work."""
        assert self._session is not None, "use ServerClient as an async context manager"
        delay = self.options.backoff
        for attempt in range(self.options.retries + 1):
            last = attempt == self.options.retries
            try:
                async with self._session.request(method, self.url + path, json=body,
                                                 headers=headers) as resp:
                    text = await resp.text()
                    if resp.status in RETRYABLE_STATUS and not last:
                        await asyncio.sleep(delay)
                        delay *= 2
                        continue
                    return resp.status, text
            except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError) as exc:
                if last:
                    raise ServerError(f"{what}: cannot connect to {self.url}: {_reason(exc)}") from None
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


def auth_hint(status: int) -> str:
    """What a 401/403 means for the user, appended to the error line."""
    if status in (401, 403):
        return " (the server wants an API key: pass --api-key or set GOLDEN_API_KEY)"
    return ""


def _decode(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise MalformedResponse(f"{what}: response is not JSON ({exc.msg} at {exc.pos})") from None


def _short(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "..."


def _reason(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__
