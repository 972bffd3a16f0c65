"""An HTTP proxy in front of a real server that runs one action between two of a client's
requests: once `after` POST /generate requests were answered, the next one waits while the
action runs, then goes on. A server that refuses a change while any request runs (SGLang's
PUT/DELETE /hicache/storage-backend) then gets it at a known point of a running replay, however
loaded the machine: retrying into the gaps between requests lost that race on a busy 2-core box
(every try refused until the replay's last request was answered).

Everything else is passed through as it is (method, path, headers, body; status and body back).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib import error, request

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host"}


@contextmanager
def pausing_proxy(upstream: str, after: int, action: Callable[[], object]) -> Iterator[dict]:
    """Yields {"url": the proxy's URL, "ran_after": answered generates when the action ran,
    "result": what the action returned} (the last two once it ran)."""
    state: dict = {"answered": 0, "ran_after": None, "result": None}
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:  # quiet
            pass

        def forward(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0) or 0))
            is_generate = self.command == "POST" and self.path.startswith("/generate")
            if is_generate:
                with lock:
                    if state["ran_after"] is None and state["answered"] >= after:
                        state["ran_after"] = state["answered"]
                        state["result"] = action()
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
            req = request.Request(upstream + self.path, data=body or None, headers=headers,
                                  method=self.command)
            try:
                with request.urlopen(req, timeout=900) as resp:
                    status, payload, kind = resp.getcode(), resp.read(), resp.headers.get("Content-Type")
            except error.HTTPError as exc:
                status, payload, kind = exc.code, exc.read(), exc.headers.get("Content-Type")
            if is_generate and status == 200:
                with lock:
                    state["answered"] += 1
            self.send_response(status)
            self.send_header("Content-Type", kind or "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_POST = do_PUT = do_DELETE = forward

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        state["url"] = f"http://127.0.0.1:{server.server_address[1]}"
        yield state
    finally:
        server.shutdown()
        server.server_close()
