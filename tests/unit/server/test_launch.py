"""The launcher's in-process parts (replay/server/launch.py): the HTTP probe and the log tail. Its
process life cycle against misbehaving fake servers is tests/integration/test_launch_lifecycle.py."""

from __future__ import annotations

from replay.server.launch import http_status, log_tail, server_env
from replay.server.process_group import MARKER_ENV
from replay.server.profile import Rendered


def test_the_warm_up_carries_the_api_key_for_a_server_started_with_one():
    import http.server
    import threading

    seen: list[str | None] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - the http.server API
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            seen.append(self.headers.get("Authorization"))
            ok = self.headers.get("Authorization") == "Bearer k3y"
            self.send_response(200 if ok else 401)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    httpd = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_port}"
    try:
        assert http_status("POST", url + "/generate", body={}, timeout=5) == 401
        assert http_status("POST", url + "/generate", body={}, timeout=5, api_key="k3y") == 200
    finally:
        httpd.shutdown()
    assert seen == [None, "Bearer k3y"]


def test_a_line_the_server_repeats_is_shown_once_with_its_count(tmp_path):
    log = tmp_path / "server.log"
    log.write_text("loading weights: this will take forever\n"
                   + 'fake: "GET /health HTTP/1.1" 503 -\n' * 40)
    assert log_tail(log) == ["loading weights: this will take forever",
                             'fake: "GET /health HTTP/1.1" 503 - (x40)']


def test_a_server_inherits_the_callers_environment_but_not_the_tools_secrets():
    env = server_env(Rendered(argv=["x"], env={}, cwd=None), "m1",
                     environ={"NCCL_NVLS_ENABLE": "0", "GOLDEN_API_KEY": "k3y", "PATH": "/bin"})
    assert env["NCCL_NVLS_ENABLE"] == "0" and env["PATH"] == "/bin"
    assert "GOLDEN_API_KEY" not in env and env[MARKER_ENV] == "m1"


def test_the_rendered_variables_win_over_the_inherited_ones():
    env = server_env(Rendered(argv=["x"], env={"NCCL_NVLS_ENABLE": "0"}, cwd=None),
                     environ={"NCCL_NVLS_ENABLE": "1"})
    assert env["NCCL_NVLS_ENABLE"] == "0"
