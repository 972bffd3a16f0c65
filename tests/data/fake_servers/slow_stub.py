"""The test stub as a launchable server whose /generate never answers in time.

On its first /generate it writes "PID PGID" to --pid-file (so a test knows a run is in the middle
of a request), then sleeps --delay seconds before answering. Run it under `sh -c` to make the
process group hold more than one process, as real launch profiles do.
"""

import argparse
import asyncio
import os
import sys
from pathlib import Path

from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repository root

from tests.support.stub_server import StubConfig, StubServer  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--pid-file", required=True)
    parser.add_argument("--delay", type=float, default=600.0)
    opts = parser.parse_args()
    stub = StubServer(StubConfig(radix=False))

    async def generate(request):
        Path(opts.pid_file).write_text(f"{os.getpid()} {os.getpgrp()}\n")
        await asyncio.sleep(opts.delay)
        return await stub._generate(request)

    async def health(request):
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_get("/health", health)
    app.router.add_post("/generate", generate)
    app.router.add_get("/server_info", stub._server_info)
    app.router.add_get("/model_info", stub._model_info)
    app.router.add_route("*", "/flush_cache", stub._flush)
    web.run_app(app, host=opts.host, port=opts.port, print=None, handle_signals=True)


main()
