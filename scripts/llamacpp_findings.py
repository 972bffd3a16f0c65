#!/usr/bin/env python3
"""Capture llama-server answers for the adapter tests, and reproduce docs/findings.md.

    python3 scripts/llamacpp_findings.py ascii-models  # the *-ascii-f32.gguf variants (seconds)
    python3 scripts/llamacpp_findings.py capture       # raw JSON -> tests/data/apis/
    python3 scripts/llamacpp_findings.py findings      # record/replay runs -> docs/findings/llamacpp/

Needs the binary from scripts/build_llama_server.sh and the tiny models from
scripts/make_tiny_gguf.py (both in ${GOLDEN_LLAMA_CACHE:-~/.cache/golden-replay/llama.cpp}).

`ascii-models` derives, from each tiny model, a copy whose 128 high byte-fallback tokens
(<0x80>..<0xFF>) are typed as normal tokens, so they print as their ASCII names instead of raw
bytes. Weights and every other byte stay the same, so the numbers are the same. Why: llama.cpp
leaves out the logprob row of any generated token after which the text ends inside an incomplete
UTF-8 character (server-context.cpp, process_token), and a random-weight model generates such
bytes all the time; the adapters refuse those answers (docs/apis.md), so the cache comparison
needs a vocabulary that prints only complete characters.

`capture` starts llama-server on a free loopback port and saves the exact bytes it answers to
the bodies that replay/server/apis/llamacpp.py and replay/server/apis/openai.py send (plus /props, /v1/models
and the slot endpoints), with INDEX.json naming each file's request and server flags.

`findings` runs the CLI (`golden record` / `golden replay`, in-process) against servers started
from the llamacpp-* launch profiles (plus each case's extra flags), for every case in CASES, and
writes each replay's JSON report plus SUMMARY.json (commands, verdicts, hits, divergences).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from typer.testing import CliRunner  # noqa: E402

from cli.main import app  # noqa: E402
from replay.server.apis.llamacpp import LlamaCppApi  # noqa: E402
from replay.server.apis.openai import OpenAIApi  # noqa: E402
from replay.server.launch import launched  # noqa: E402
from replay.server.profile import load_profile, render  # noqa: E402

_spec = importlib.util.spec_from_file_location("llamacpp_probe", REPO / "scripts" / "llamacpp_probe.py")
probe = importlib.util.module_from_spec(_spec)  # type: ignore[arg-type]
sys.modules.setdefault("llamacpp_probe", probe)
_spec.loader.exec_module(probe)  # type: ignore[union-attr]

APIS_DIR = REPO / "tests" / "data" / "apis"
FINDINGS_DIR = REPO / "docs" / "findings" / "llamacpp"
THREADS = ["--threads", "1", "--threads-batch", "1"]

# Two small scenarios inside the tiny models' 768-token vocabulary (ids 3..258 are the byte
# tokens; the prompts use ids above them). HISTORY: every conversation alone in its group, so
# turn t+1 reuses the whole history of turn t (its prompt and its generated tokens). BRANCHING:
# two branches per group share a 48-token prompt prefix.
HISTORY = """groups = 3
branches = 1
prefix_len = 48
suffix_len = 8
turns = 2
turn_suffix_len = 8
max_new_tokens = 8
token_lo = 300
token_hi = 760
top_k = 3
seed = 0
"""
BRANCHING = HISTORY.replace("groups = 3", "groups = 2").replace("branches = 1", "branches = 2")
SCENARIOS = {"history": HISTORY, "branching": BRANCHING}
FA_OFF = ("-fa", "off")


@dataclass(frozen=True)
class Case:
    """One finding: record `scenario` on llamacpp-reference, replay on llamacpp-cached."""

    name: str
    model: str  # tiny model name; its ASCII variant is used
    scenario: str  # "history" | "branching" (or another key of the scenarios written to the work folder)
    reference_args: tuple[str, ...] = ()  # appended to llamacpp-reference
    replay_args: tuple[str, ...] = ()  # appended to llamacpp-cached
    api: str = "llamacpp"
    expect: str = "auto"
    replay_cli: tuple[str, ...] = ()  # more `golden replay` options
    concurrency: int = 1  # requests in flight: more than 1 lets llama.cpp batch them together
    env: tuple[tuple[str, str], ...] = ()  # environment of both servers


CASES = [
    Case("llama-branching-fa-off", "tiny-llama", "branching", FA_OFF, FA_OFF, expect="any"),
    Case("llama-history-fa-off", "tiny-llama", "history", FA_OFF, FA_OFF),
    Case("llama-history-fa-off-ram", "tiny-llama", "history", FA_OFF, (*FA_OFF, "--parallel", "1")),
    Case("llama-history-fa-off-noram", "tiny-llama", "history", FA_OFF,
         (*FA_OFF, "--parallel", "1", "--cache-ram", "0"), expect="any"),
    Case("llama-history-fa-off-openai", "tiny-llama", "history", FA_OFF, FA_OFF, api="openai"),
    Case("llama-history-fa-off-batched", "tiny-llama", "history", FA_OFF, FA_OFF, concurrency=16),
    Case("llama-history-fa-off-repeat", "tiny-llama", "history", FA_OFF, FA_OFF,
         replay_cli=("--repeat", "2")),
    Case("llama-history-fa-off-repeat-noram", "tiny-llama", "history", FA_OFF,
         (*FA_OFF, "--cache-ram", "0"), replay_cli=("--repeat", "2")),
    Case("llama-branching-fa", "tiny-llama", "branching"),
    Case("llama-branching-fa-ub32", "tiny-llama", "branching", ("-ub", "32"), ("-ub", "32")),
    Case("llama-history-fa", "tiny-llama", "history"),
    Case("jamba-history", "tiny-jamba", "history", ("--ctx-checkpoints", "8"), ("--ctx-checkpoints", "8")),
    Case("jamba-branching", "tiny-jamba", "branching", ("--ctx-checkpoints", "8"),
         ("--ctx-checkpoints", "8"), expect="any"),
    Case("mamba2-history", "tiny-mamba2", "history", ("--ctx-checkpoints", "8"), ("--ctx-checkpoints", "8")),
]


GGUF_PY = probe.CACHE / "llama.cpp" / "gguf-py"
BYTE_TYPE, NORMAL_TYPE = 6, 1  # llama_token_type: LLAMA_TOKEN_TYPE_BYTE, _NORMAL
TOKEN_TYPE_KEY = "tokenizer.ggml.token_type"


def ascii_model_path(name: str) -> Path:
    return probe.CACHE / "models" / f"{name}-ascii-f32.gguf"


def ascii_model(name: str) -> Path:
    """The ASCII-printing variant of tiny model `name`, derived when missing or stale."""
    src, dst = probe.model_path(name), ascii_model_path(name)
    if dst.is_file() and dst.stat().st_mtime >= src.stat().st_mtime:
        return dst
    sys.path.insert(0, str(GGUF_PY))
    import gguf  # llama.cpp's own gguf-py, from the tree build_llama_server.sh unpacked

    reader = gguf.GGUFReader(src)
    arch = reader.get_field("general.architecture").contents()
    tmp = dst.with_suffix(".tmp")
    writer = gguf.GGUFWriter(tmp, arch=arch, endianess=reader.endianess)
    for field in reader.fields.values():
        if field.name == "general.architecture" or field.name.startswith("GGUF."):
            continue  # the writer adds these itself
        value = field.contents()
        if field.name == TOKEN_TYPE_KEY:
            tokens = reader.get_field("tokenizer.ggml.tokens").contents()
            value = [NORMAL_TYPE if t == BYTE_TYPE and _high_byte(tok) else t
                     for t, tok in zip(value, tokens)]
        val_type = field.types[0]
        sub_type = field.types[-1] if val_type == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, value, val_type, sub_type=sub_type)
    for tensor in reader.tensors:
        writer.add_tensor_info(tensor.name, tensor.data.shape, tensor.data.dtype,
                               tensor.data.nbytes, tensor.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for tensor in reader.tensors:
        writer.write_tensor_data(tensor.data, tensor_endianess=reader.endianess)
    writer.close()
    tmp.replace(dst)
    return dst


def _high_byte(token: str) -> bool:
    """`<0x80>`..`<0xFF>`: a byte that is not a whole UTF-8 character on its own."""
    return len(token) == 6 and token.startswith("<0x") and token.endswith(">") and int(token[3:5], 16) >= 0x80


def log(msg: str) -> None:
    print(f"[llamacpp_findings] {msg}", file=sys.stderr, flush=True)


def prompt_ids(n: int, salt: int = 0) -> np.ndarray:
    return np.array([300 + (37 * i + 101 * salt) % 450 for i in range(n)], dtype=np.int32)


class Capture:
    """Writes response bytes as the server sent them, and an index of what was asked."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.index: dict[str, Any] = {}

    def save(self, name: str, srv: Any, method: str, path: str, body: Any) -> bytes:
        status, raw = srv.request(method, path, body)
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / f"{name}.json").write_bytes(raw if raw.endswith(b"\n") else raw + b"\n")
        self.index[f"{name}.json"] = {"endpoint": f"{method} {path}", "request": body,
                                      "status": status, "server_args": srv.extra}
        return raw


def capture(out: Path) -> None:
    binary = probe.find_server()
    assert binary is not None, "llama-server not built: bash scripts/build_llama_server.sh"
    cap = Capture(out)
    for model in ("tiny-llama", "tiny-jamba"):
        gguf = ascii_model(model)
        with tempfile.TemporaryDirectory(prefix="golden-slots-") as slots:
            args = ["--parallel", "2", "--cache-ram", "0", "--no-webui", *THREADS,
                    "--slot-save-path", slots + "/"]
            with probe.LlamaServer(binary, gguf, args) as srv:
                _capture_model(cap, srv, f"{model}-ascii", gguf)
        with probe.LlamaServer(binary, gguf, ["--parallel", "1", "--no-webui", *THREADS]) as srv:
            cap.save(f"{model}-ascii__slot_probe_disabled", srv, "POST", "/slots/0?action=golden-replay-probe", None)
            cap.save(f"{model}-ascii__erase_disabled", srv, "POST", "/slots/0?action=erase", None)
    # the original vocabulary: generated byte tokens lose their rows
    with probe.LlamaServer(binary, probe.model_path("tiny-llama"), ["--parallel", "1", "--no-webui", *THREADS]) as srv:
        _, body = LlamaCppApi(cache_prompt=False).request(prompt_ids(40), 6, 3)
        cap.save("tiny-llama__completion_dropped_rows", srv, "POST", "/completion", body)
        api = OpenAIApi(reference=True)
        api.model_id = str(probe.model_path("tiny-llama"))
        _, body = api.request(prompt_ids(40), 6, 3)
        cap.save("tiny-llama__v1_completions_dropped_rows", srv, "POST", "/v1/completions", body)
    (out / "INDEX.json").write_text(json.dumps(cap.index, indent=1) + "\n")


def _capture_model(cap: Capture, srv: Any, model: str, gguf: Path) -> None:
    cap.save(f"{model}__props", srv, "GET", "/props", None)
    cap.save(f"{model}__v1_models", srv, "GET", "/v1/models", None)
    cap.save(f"{model}__server_info", srv, "GET", "/server_info", None)
    cap.save(f"{model}__slot_probe_enabled", srv, "POST", "/slots/0?action=golden-replay-probe", None)
    first = prompt_ids(40)
    _, body = LlamaCppApi(cache_prompt=False).request(first, 6, 3)
    cap.save(f"{model}__completion_reference", srv, "POST", "/completion", body)
    _, body = LlamaCppApi(cache_prompt=True).request(first, 6, 3)
    cap.save(f"{model}__completion_cached_first", srv, "POST", "/completion", body)
    longer = np.concatenate([first, prompt_ids(10, salt=3)])
    _, body = LlamaCppApi(cache_prompt=True).request(longer, 6, 3)
    cap.save(f"{model}__completion_cached_extend", srv, "POST", "/completion", body)
    _, body = LlamaCppApi(cache_prompt=False).request(longer, 6, 0)
    cap.save(f"{model}__completion_top0", srv, "POST", "/completion", body)
    _, body = LlamaCppApi(cache_prompt=False).request(first, 6, 3)
    body["post_sampling_probs"] = True
    cap.save(f"{model}__completion_post_sampling_probs", srv, "POST", "/completion", body)
    api = OpenAIApi(reference=True)
    api.model_id = str(gguf)
    _, body = api.request(first, 6, 3)
    cap.save(f"{model}__v1_completions", srv, "POST", "/v1/completions", body)
    cap.save(f"{model}__erase_enabled", srv, "POST", "/slots/0?action=erase", None)


@dataclass(frozen=True)
class Target:
    """Which llama-server build runs the cases, and the flags every launch of it gets."""

    name: str
    binary: Path | None = None  # None: the one scripts/build_llama_server.sh built
    args: tuple[str, ...] = tuple(THREADS)


CPU = Target("cpu")


@contextlib.contextmanager
def serve(profile: str, gguf: Path, extra: tuple[str, ...], log_dir: Path,
          target: Target = CPU, env: tuple[tuple[str, str], ...] = ()) -> Iterator[tuple[str, str]]:
    """(url, the server's command line) of a llama-server started from a built-in profile, with
    `env` added to its environment."""
    binary = target.binary or probe.find_server()
    settings = {"GOLDEN_LLAMA_SERVER": str(binary), **dict(env)}
    before = {k: os.environ.get(k) for k in settings}
    os.environ.update(settings)
    prof = load_profile(profile)
    args = (*target.args, *extra)
    argv = render(prof, model=str(gguf), port=0, log_dir=log_dir, extra_args=args).argv
    shown = " ".join(["llama-server", *argv[argv.index("-m"):]]).replace(" --port 0", " --port PORT")
    shown = shown.replace(str(probe.CACHE), "$GOLDEN_LLAMA_CACHE").replace(str(log_dir / "scratch"), "SCRATCH")
    shown = " ".join([*(f"{k}={v}" for k, v in env), shown])
    try:
        with launched(prof, model=str(gguf), log_path=log_dir / f"{profile}.log", extra_args=args) as url:
            yield url, shown
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def golden(*args: str) -> tuple[int, str]:
    """Run the CLI in-process, as a user would run `golden ARGS`."""
    res = CliRunner().invoke(app, list(args))
    return res.exit_code, res.output


def reference_golden(case: Case, work: Path) -> Path:
    """Where `case`'s reference recording goes: cases with the same model, scenario and
    reference flags share one."""
    flags = "-".join([*(a.lstrip("-") for a in case.reference_args), *(f"{k}-{v}" for k, v in case.env)])
    return work / f"{case.model}-{case.scenario}-{flags or 'default'}.zarr"


def run_case(case: Case, work: Path, out: Path, target: Target = CPU) -> dict[str, Any]:
    gguf = ascii_model(case.model)
    scenario = work / f"{case.scenario}.toml"
    ref = reference_golden(case, work)
    result: dict[str, Any] = {"model": gguf.name, "scenario": case.scenario}
    with serve("llamacpp-reference", gguf, case.reference_args, work, target, case.env) as (url, shown):
        record = ["record", "--server", "URL", "--scenario", f"{case.scenario}.toml", "--out",
                  ref.name, "--api", "llamacpp", "--quiet"]
        result["reference_server"] = shown
        result["record"] = "golden " + " ".join(record)
        if not ref.exists():
            code, output = golden(*[url if a == "URL" else str(scenario) if a.endswith(".toml")
                                    else str(ref) if a == ref.name else a for a in record])
            if code != 0:
                return {**result, "record_exit": code, "record_output": output}
    return {**result, **replay_case(case, ref, out / f"{case.name}.json", work, target)}


def replay_case(case: Case, ref: Path, report: Path, work: Path, target: Target = CPU) -> dict[str, Any]:
    """Replay golden `ref` the way `case` does, against `target`'s cached server; what the
    report says (server command, verdict, hits, first divergences)."""
    gguf = ascii_model(case.model)
    replay = ["replay", ref.name, "--server", "URL", "--report", report.name, "--api", case.api,
              "--concurrency", str(case.concurrency), "--expect-cache", case.expect, *case.replay_cli,
              "--quiet"]
    with serve("llamacpp-cached", gguf, case.replay_args, work, target, case.env) as (url, shown):
        result: dict[str, Any] = {"replay_server": shown, "replay": "golden " + " ".join(replay)}
        code, output = golden(*[url if a == "URL" else str(ref) if a == ref.name
                                else str(report) if a == report.name else a for a in replay])
    if not report.is_file():
        return {**result, "exit": code, "replay_output": output.strip()}
    doc = json.loads(report.read_text())
    failed = [r for r in doc["requests"] if not r["passed"]]
    key = (lambda r: f"{r['id']}#{r['repeat']}") if doc["summary"]["repeats"] > 1 else (lambda r: r["id"])
    return {**result, "exit": code, "verdict": doc["verdict"], "expect_cache": doc["expect_cache"],
            "cache_hit_lengths": doc["summary"]["cache_hit_lengths"],
            "requests": doc["summary"]["requests"], "requests_diverged": doc["summary"]["requests_diverged"],
            "cache_misses": doc["summary"]["cache_misses"], "max_ulp": doc["summary"]["max_ulp"],
            "failed": {key(r): {"status": r["status"], "cached_tokens": r["cached_tokens"],
                                 "first_divergence": r["first_divergence"] and {
                                     k: r["first_divergence"][k] for k in ("position", "kind", "ulp")}}
                       for r in failed}}


def refused_original(work: Path) -> dict[str, Any]:
    """The original vocabulary: the reference recording is refused (exit 2)."""
    gguf = probe.model_path("tiny-llama")
    with serve("llamacpp-reference", gguf, (), work) as (url, shown):
        code, output = golden("record", "--server", url, "--scenario", str(work / "history.toml"),
                              "--out", str(work / "original.zarr"), "--api", "llamacpp", "--quiet")
    return {"model": gguf.name, "reference_server": shown, "exit": code, "output": output.strip()}


def write_scenarios(work: Path, out: Path, scenarios: dict[str, str] = SCENARIOS) -> None:
    for name, text in scenarios.items():
        (work / f"{name}.toml").write_text(text)
        (out / f"{name}.toml").write_text(text)


def findings(out: Path, only: list[str], target: Target = CPU, cases: list[Case] = CASES,
             work: Path | None = None) -> None:
    """Run `cases` (all, or those named in `only`) on `target`; reports and SUMMARY.json in
    `out`. The reference goldens go to `work` (kept), or to a temporary folder."""
    out.mkdir(parents=True, exist_ok=True)
    summary: dict[str, Any] = {}
    with contextlib.ExitStack() as stack:
        if work is None:
            work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="golden-findings-")))
        work.mkdir(parents=True, exist_ok=True)
        write_scenarios(work, out)
        if target == CPU and (not only or "original" in only):
            summary["llama-original-vocabulary"] = refused_original(work)
        for case in cases:
            if only and case.name not in only:
                continue
            log(f"case {case.name} on {target.name}")
            summary[case.name] = run_case(case, work, out, target)
    path = out / "SUMMARY.json"
    old = json.loads(path.read_text()) if only and path.exists() else {}
    path.write_text(json.dumps({**old, **summary}, indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["ascii-models", "capture", "findings"])
    ap.add_argument("--out", type=Path, help="output folder")
    ap.add_argument("--case", action="append", default=[], help="findings: only this case (repeat)")
    args = ap.parse_args(argv)
    if args.what == "ascii-models":
        for name in probe.MODELS:
            print(name, ascii_model(name))
    elif args.what == "capture":
        capture(args.out or APIS_DIR)
    else:
        findings(args.out or FINDINGS_DIR, args.case)
    return 0


if __name__ == "__main__":
    sys.exit(main())
