"""Capture what SGLang's own HTTP front end answers to the bodies the SGLang adapter sends, for
the adapter conformance tests (tests/unit/server/apis/conformance.py).

    python scripts/capture_sglang_answers.py [--profile embedded-sglang-radix]

Launches the profile (SGLang 0.5.23's HTTP server, TokenizerManager and DetokenizerManager over
the embedded engine: bash scripts/install_sglang.sh first), asks /server_info, /model_info and
three /generate bodies built by `SGLangApi.request` (a first turn of 140 tokens with top-3, its
extension, which hits the radix cache for the first turn's whole pages, and the extension with
top-0), writes each answer's bytes as sent to
tests/data/apis/PROFILE__NAME.json and adds the requests to tests/data/apis/INDEX.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from replay.server.apis.sglang import SGLangApi  # noqa: E402
from replay.server.target import ServerTarget  # noqa: E402

OUT = ROOT / "tests" / "data" / "apis"


def prompt_ids(n: int, salt: int = 0) -> np.ndarray:
    """Like scripts/llamacpp_findings.py's prompts, inside every embedded model's vocabulary."""
    return np.array([3 + (37 * i + 101 * salt) % 200 for i in range(n)], dtype=np.int32)


def exchange(url: str, method: str, path: str, body: Any) -> tuple[int, bytes]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"} if data else {})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(request, timeout=120) as resp:
        return int(resp.status), resp.read()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="embedded-sglang-radix")
    args = parser.parse_args()
    index_path = OUT / "INDEX.json"
    index = json.loads(index_path.read_text())
    api = SGLangApi()
    first = prompt_ids(140)
    longer = np.concatenate([first, prompt_ids(10, salt=3)])
    asks = [("server_info", "GET", "/server_info", None),
            ("model_info", "GET", "/model_info", None),
            ("generate_first", "POST", *api.request(first, 6, 3)),
            ("generate_cached_extend", "POST", *api.request(longer, 6, 3)),
            ("generate_top0", "POST", *api.request(longer, 6, 0))]
    with tempfile.TemporaryDirectory(prefix="golden-capture-") as logs, \
            ServerTarget(profile=args.profile, log_dir=Path(logs)).serving() as url:
        for name, method, path, body in asks:
            status, raw = exchange(url, method, path, body)
            file = f"{args.profile}__{name}.json"
            (OUT / file).write_bytes(raw if raw.endswith(b"\n") else raw + b"\n")
            index[file] = {"endpoint": f"{method} {path}", "request": body, "status": status,
                           "server_args": [f"--launch {args.profile}"]}
            print(f"{file}: HTTP {status}, {len(raw)} bytes")
    index_path.write_text(json.dumps(index, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
