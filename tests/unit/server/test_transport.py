"""The transport never sends a request on a connection its server has given up as idle."""

from __future__ import annotations

import asyncio
import time

import pytest

from replay.server.transport import ClientOptions, ServerClient
from replay.utils.errors import UsageError

BODY = b'{"ok": true}'


class ClosingLateServer:
    """An HTTP/1.1 server with a keep-alive of `idle_s` whose close is seen late: a request that
    arrives on a connection idle longer than that is dropped unanswered, as by a server that
    closed the connection while the request was on its way (the keep-alive race)."""

    def __init__(self, idle_s: float) -> None:
        self.idle_s, self.connections = idle_s, 0

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        answered = None
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
                await reader.readexactly(content_length(head))
            except asyncio.IncompleteReadError:  # the client closed the connection
                return
            if answered is not None and time.monotonic() - answered > self.idle_s:
                writer.close()
                return
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\n\r\n%s" % (len(BODY), BODY))
            await writer.drain()
            answered = time.monotonic()


def content_length(head: bytes) -> int:
    for line in head.lower().split(b"\r\n"):
        if line.startswith(b"content-length:"):
            return int(line.split(b":")[1])
    return 0


async def two_posts_apart(server: ClosingLateServer, options: ClientOptions, pause_s: float) -> None:
    listener = await asyncio.start_server(server.serve, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    try:
        async with ServerClient(f"http://127.0.0.1:{port}", options) as client:
            await client.raw("POST", "/generate", "request 1", {"text": "a"})
            await asyncio.sleep(pause_s)  # a POST is not retried by aiohttp, unlike a GET
            await client.raw("POST", "/generate", "request 2", {"text": "b"})
    finally:
        listener.close()


def test_a_connection_idle_past_the_keepalive_is_not_reused():
    server = ClosingLateServer(idle_s=0.3)
    asyncio.run(two_posts_apart(server, ClientOptions(keepalive=0.1), pause_s=0.5))
    assert server.connections == 2


def test_the_default_keepalive_is_below_uvicorn_and_httplib_five_seconds():
    assert ClientOptions().keepalive < 5.0


@pytest.mark.parametrize("keepalive", [0, -1.0, float("inf")])
def test_a_keepalive_that_is_not_a_positive_time_is_refused(keepalive):
    with pytest.raises(UsageError, match="keepalive"):
        ClientOptions(keepalive=keepalive)
