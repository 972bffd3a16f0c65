"""A minimal SGLang-protocol HTTP server on the standard library, for the launcher's fakes.

Each fake is a script that decides how to misbehave and calls `serve`; stdlib only, so a fake
starts in a few tens of milliseconds on a busy CI machine.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

OnGenerate = Callable[[dict[str, Any]], dict[str, Any]]


def args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    known, _ = parser.parse_known_args()
    return known


def one_token(body: dict[str, Any]) -> dict[str, Any]:
    """A well-formed answer: one token per requested position, logprob -0.5."""
    n = body.get("sampling_params", {}).get("max_new_tokens", 1)
    return {"text": "", "output_ids": [7] * n,
            "meta_info": {"id": "fake", "finish_reason": {"type": "length", "length": n},
                          "prompt_tokens": len(body.get("input_ids", [])), "completion_tokens": n,
                          "cached_tokens": 0, "output_token_logprobs": [[-0.5, 7, None]] * n,
                          "output_top_logprobs": None, "e2e_latency": 0.0}}


def serve(health_status: int = 200, on_generate: OnGenerate = one_token) -> None:
    opts = args()
    info = {"model_path": "fake/model", "vocab_size": 4096, "page_size": 16,
            "disable_radix_cache": True}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, fmt: str, *a: Any) -> None:
            sys.stderr.write("fake: " + (fmt % a) + "\n")

        def reply(self, status: int, payload: Any = None) -> None:
            data = json.dumps(payload).encode() if payload is not None else b""
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path.startswith("/health"):
                self.reply(health_status)
            elif self.path in ("/server_info", "/model_info"):
                self.reply(200, info)
            elif self.path.startswith("/flush_cache"):
                self.reply(200, {})
            else:
                self.reply(404, {"error": "not found"})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = json.loads(self.rfile.read(length) or b"{}")
            if self.path == "/generate":
                self.reply(200, on_generate(body))
            elif self.path.startswith("/flush_cache"):
                self.reply(200, {})
            else:
                self.reply(404, {"error": "not found"})

    server = ThreadingHTTPServer((opts.host, opts.port), Handler)
    print(f"fake server listening on {opts.host}:{opts.port}", flush=True)
    server.serve_forever()
