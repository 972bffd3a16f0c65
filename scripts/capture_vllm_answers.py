"""Capture what vLLM's own OpenAI server answers to the bodies the vLLM adapter sends, for the
adapter conformance tests (tests/unit/server/apis/conformance.py, test_vllm.py).

    python scripts/capture_vllm_answers.py [--profile vllm-prefix-cache] [--model tiny-llama]

Launches the profile on vLLM's CPU build (bash scripts/install_vllm.sh first) with the tiny
Llama of scripts/make_tiny_hf_models.py, asks what the adapter asks of the server
(/server_info?config_format=json, trimmed to vllm_config and vllm_env; /v1/models; /version) and three completions built by `VllmApi.request` after `prepare`: a reference first
turn of 400 tokens with top-3 (salted), its extension as a replay sends it (a prefix-cache hit
of three 128-token blocks) and the extension with top-0. Writes each answer's bytes to
tests/data/apis/vllm-PROFILE__NAME.json and the requests to tests/data/apis/INDEX.json.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import sys
import tempfile
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from replay.server.apis.vllm import VllmApi  # noqa: E402
from replay.server.target import ServerTarget  # noqa: E402
from replay.server.transport import ServerClient  # noqa: E402

OUT = ROOT / "tests" / "data" / "apis"
TRIMMED = ("vllm_config", "vllm_env")  # what the adapter reads of /server_info


def prompt_ids(n: int, salt: int = 0) -> np.ndarray:
    """Inside the tiny models' 2048-token vocabulary."""
    return np.array([3 + (37 * i + 101 * salt) % 2000 for i in range(n)], dtype=np.int32)


def tiny_model(name: str) -> str:
    spec = importlib.util.spec_from_file_location("make_tiny_hf_models",
                                                  ROOT / "scripts" / "make_tiny_hf_models.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules["make_tiny_hf_models"] = module
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return str(module.make(name))


def exchange(url: str, method: str, path: str, body: Any) -> tuple[int, bytes]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"} if data else {})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=300) as resp:
            return int(resp.status), resp.read()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read()


def prepared(url: str, reference: bool) -> VllmApi:
    """The adapter as a connection leaves it: the served model's id learned."""
    api = VllmApi(reference=reference)

    async def go() -> None:
        async with ServerClient(url) as client:
            await api.prepare(client)

    asyncio.run(go())
    return api


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="vllm-prefix-cache")
    parser.add_argument("--model", default="tiny-llama")
    args = parser.parse_args()
    index_path = OUT / "INDEX.json"
    index = json.loads(index_path.read_text())
    first = prompt_ids(400)
    longer = np.concatenate([first, prompt_ids(16, salt=3)])
    tag = f"vllm-{args.model}"
    with tempfile.TemporaryDirectory(prefix="golden-capture-") as logs, \
            ServerTarget(profile=args.profile, model=tiny_model(args.model),
                         log_dir=Path(logs)).serving() as url:
        reference, replay = prepared(url, True), prepared(url, False)
        asks = [("server_info", "GET", "/server_info?config_format=json", None),
                ("v1_models", "GET", "/v1/models", None),
                ("version", "GET", "/version", None),
                ("completion_reference", "POST", *reference.request(first, 6, 3)),
                ("completion_first", "POST", *replay.request(first, 6, 3)),
                ("completion_cached_extend", "POST", *replay.request(longer, 6, 3)),
                ("completion_top0", "POST", *replay.request(longer, 6, 0))]
        for name, method, path, body in asks:
            status, raw = exchange(url, method, path, body)
            if name == "server_info" and status == 200:
                info = json.loads(raw)
                raw = json.dumps({k: info[k] for k in TRIMMED if k in info}, indent=1).encode()
            file = f"{tag}__{name}.json"
            (OUT / file).write_bytes(raw if raw.endswith(b"\n") else raw + b"\n")
            index[file] = {"endpoint": f"{method} {path}", "request": body, "status": status,
                           "server_args": [f"--launch {args.profile}", f"--model {args.model}"]}
            print(f"{file}: HTTP {status}, {len(raw)} bytes")
    index_path.write_text(json.dumps(index, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
