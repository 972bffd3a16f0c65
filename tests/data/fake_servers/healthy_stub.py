"""The test suite's SGLang-protocol stub (tests/support/stub_server.py) as a launchable server.

Options: --radix / --no-radix (report cache hits or behave as a cache-disabled reference),
--drift (every response's logprob at output position 1 moves by one ULP: a replay must fail).
"""

import argparse
import sys
from pathlib import Path

import numpy as np
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repository root

from tests.support.stub_server import StubConfig, StubServer  # noqa: E402


def drift(n, ids, resp):
    entries = resp["meta_info"]["output_token_logprobs"]
    if len(entries) > 1:
        entries[1][0] = float(np.nextafter(np.float32(entries[1][0]), np.float32(0)))
    return resp


async def health(request):
    return web.Response(text="ok")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--radix", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--drift", action="store_true")
    opts, _ = parser.parse_known_args()
    stub = StubServer(StubConfig(radix=opts.radix, tamper=drift if opts.drift else None))
    app = web.Application()
    app.router.add_get("/health", health)
    app.router.add_post("/generate", stub._generate)
    app.router.add_get("/server_info", stub._server_info)
    app.router.add_get("/model_info", stub._model_info)
    app.router.add_route("*", "/flush_cache", stub._flush)
    print(f"stub listening on {opts.host}:{opts.port}", flush=True)
    web.run_app(app, host=opts.host, port=opts.port, print=None, handle_signals=True)


main()
