#!/usr/bin/env python3
"""Start a real llama.cpp `llama-server` on a tiny GGUF and capture its JSON.

Usage:
    python3 scripts/llamacpp_probe.py                 # all tiny models, default scenarios
    python3 scripts/llamacpp_probe.py tiny-llama      # one model
    python3 scripts/llamacpp_probe.py --gguf X.gguf --name mymodel
    python3 scripts/llamacpp_probe.py --no-save       # only print the findings

Needs the binary from scripts/build_llama_server.sh and the models from
scripts/make_tiny_gguf.py (both in ${GOLDEN_LLAMA_CACHE:-~/.cache/golden-replay/llama.cpp}).

For every model it starts servers on a free loopback port (always killed, as a
process group, at the end), sends greedy requests with per-token logprobs
(/completion and /v1/completions, prompt given as token ids), repeats them
with the prompt cache on and off, probes /health /props /slots /tokenize
/detokenize and slot save/restore, and, with `--ctx-checkpoints` and
`--cache-ram`, a diverging-prefix request.  Raw response bodies go to
tests/data/llamacpp/<model>__<case>.json (bytes as the server sent them,
except /props and /slots, which are trimmed and re-serialised); INDEX.json
there records, per file, the endpoint, request body, server arguments, and
what the probe found (cache counts, bitwise equality of logprobs across
cached and uncached runs, float32 exactness of the printed numbers).

Only stdlib; importable (tests use LlamaServer / find_server / model_path).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("GOLDEN_LLAMA_CACHE", Path.home() / ".cache/golden-replay/llama.cpp"))
DATA_DIR = REPO / "tests" / "data" / "llamacpp"
MODELS = ["tiny-llama", "tiny-jamba", "tiny-mamba2"]
RECURRENT = {"tiny-jamba", "tiny-mamba2"}

# Request fields that give greedy decoding with per-token logprobs and ids.
# temperature 0 makes the "temperature" sampler keep only the arg-max logit;
# it must stay in the sampler chain (a "samplers" list without "temperature"
# ignores temperature=0 and samples from the distribution).
GREEDY = {
    "temperature": 0.0,
    "samplers": ["temperature"],
    "n_probs": 5,
    "post_sampling_probs": False,
    "return_tokens": True,
}


def log(msg: str) -> None:
    print(f"[llamacpp_probe] {msg}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------ locations

def find_server() -> Path | None:
    """The llama-server binary built by scripts/build_llama_server.sh, or None."""
    env = os.environ.get("GOLDEN_LLAMA_SERVER")
    cands = [Path(env)] if env else []
    cands.append(CACHE / "llama-server")
    cands.extend(sorted(CACHE.glob("build-*/bin/llama-server"), reverse=True))
    for c in cands:
        if c.is_file() and os.access(c, os.X_OK):
            return c.resolve()
    return None


def model_path(name: str) -> Path:
    return CACHE / "models" / f"{name}-f32.gguf"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --------------------------------------------------------------------- server

class LlamaServer:
    """llama-server in its own process group on 127.0.0.1:<free port>.

    Use as a context manager; the whole process group is killed on exit.
    """

    def __init__(self, binary: Path, gguf: Path, args: list[str] | None = None,
                 log_path: Path | None = None, ready_timeout: float = 120.0):
        self.binary = Path(binary)
        self.gguf = Path(gguf)
        self.extra = list(args or [])
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.ready_timeout = ready_timeout
        self._own_log = log_path is None
        self.log_path = log_path or Path(tempfile.mkstemp(prefix="llama-server-", suffix=".log")[1])
        self.proc: subprocess.Popen | None = None

    @property
    def argv(self) -> list[str]:
        return [str(self.binary), "-m", str(self.gguf), "--host", "127.0.0.1", "--port", str(self.port),
                *self.extra]

    def __enter__(self) -> "LlamaServer":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        # hermetic: no LLAMA_ARG_* from the caller's environment, never a download
        env = {k: v for k, v in os.environ.items() if not k.startswith("LLAMA_ARG_")}
        env["LLAMA_OFFLINE"] = "1"
        self._logf = open(self.log_path, "wb")
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=self._logf,
                                     stderr=subprocess.STDOUT, env=env, start_new_session=True)
        deadline = time.monotonic() + self.ready_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama-server exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                status, _ = self.request("GET", "/health", timeout=2)
                if status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        self.stop()
        raise TimeoutError(f"llama-server not healthy after {self.ready_timeout}s:\n{self.log_tail()}")

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        else:
            # leader gone: still make sure nothing of the group lingers
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        self._logf.close()
        self.proc = None

    def log_text(self) -> str:
        with contextlib.suppress(OSError):
            return self.log_path.read_text(errors="replace")
        return ""

    def log_tail(self, n: int = 40) -> str:
        return "\n".join(self.log_text().splitlines()[-n:])

    def request(self, method: str, path: str, body: Any = None, timeout: float = 120) -> tuple[int, bytes]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"} if data else {})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def post(self, path: str, body: Any) -> tuple[int, bytes]:
        return self.request("POST", path, body)

    def get(self, path: str) -> tuple[int, bytes]:
        return self.request("GET", path)


# --------------------------------------------------------------------- checks

def is_float32(x: float) -> bool:
    """True when the double x is exactly representable as an IEEE float32."""
    return struct.unpack("<f", struct.pack("<f", x))[0] == x


_NUM_RE = re.compile(rb'"(?:logprob|prob)":(-?[0-9.eE+-]+)')


def number_texts(raw: bytes) -> list[str]:
    return [m.decode() for m in _NUM_RE.findall(raw)]


def logprob_rows(resp: dict) -> list[dict]:
    """Per generated token: id, logprob and top candidates, for either endpoint."""
    if "completion_probabilities" in resp:
        return resp["completion_probabilities"]
    lp = resp.get("choices", [{}])[0].get("logprobs")
    return (lp or {}).get("content", [])


def align_rows(tokens: list[int], rows: list[dict]) -> list[dict | None]:
    """Map each generated token id to its logprob row (None where the server dropped it).

    llama-server only records a token's probabilities when the text generated
    so far ends in complete UTF-8: a token whose piece is (or ends with) an
    unfinished multi-byte sequence (byte-fallback tokens <0xE2>..., or
    byte-level BPE pieces that split a character) gets no row at all, and
    a stop word's tokens are cut from the end.  So rows are an in-order
    subsequence of `tokens`, not a positional match.
    """
    out: list[dict | None] = []
    j = 0
    for t in tokens:
        if j < len(rows) and rows[j]["id"] == t:
            out.append(rows[j])
            j += 1
        else:
            out.append(None)
    if j != len(rows):
        raise ValueError(f"logprob rows are not a subsequence of tokens: {[r['id'] for r in rows]} vs {tokens}")
    return out


def lp_key(rows: list[dict]) -> list:
    """Bit-level key: ids plus the float32 bits of every (log)prob."""
    def bits(x: float) -> str:
        return struct.pack("<f", x).hex()
    out = []
    for r in rows:
        v = r.get("logprob", r.get("prob"))
        tops = r.get("top_logprobs", r.get("top_probs", []))
        out.append((r["id"], bits(v), tuple((t["id"], bits(t.get("logprob", t.get("prob")))) for t in tops)))
    return out


def float_findings(raw: bytes, resp: dict) -> dict:
    texts = number_texts(raw)
    vals = [float(t) for t in texts]
    digits = [len(re.sub(r"[^0-9]", "", t.split("e")[0].split("E")[0]).lstrip("0")) for t in texts]
    return {
        "n_numbers": len(vals),
        "all_exact_float32": all(is_float32(v) for v in vals),
        "max_significant_digits": max(digits) if digits else 0,
        "examples": texts[:2],
    }


# ------------------------------------------------------------------ capturing

def _scrub(text: str) -> str:
    """Local cache paths -> ${GOLDEN_LLAMA_CACHE}, so captured files do not depend on the machine."""
    for c in sorted({str(CACHE.resolve()), str(CACHE)}, key=len, reverse=True):
        text = text.replace(c, "${GOLDEN_LLAMA_CACHE}")
    return text


def _trim(obj: Any, max_str: int = 300, max_list: int = 8) -> Any:
    if isinstance(obj, str):
        obj = _scrub(obj)
        return obj if len(obj) <= max_str else obj[:max_str] + f"...<{len(obj) - max_str} chars trimmed>"
    if isinstance(obj, list):
        items = [_trim(x, max_str, max_list) for x in obj[:max_list]]
        if len(obj) > max_list:
            items.append(f"...<{len(obj) - max_list} items trimmed>")
        return items
    if isinstance(obj, dict):
        return {k: _trim(v, max_str, max_list) for k, v in obj.items()}
    return obj


def _caller_scenario() -> str:
    """Name of the probe_* function on the stack (the server configuration in use)."""
    f = sys._getframe(1)
    while f is not None:
        if f.f_code.co_name.startswith("probe_"):
            return f.f_code.co_name[len("probe_"):]
        f = f.f_back
    return "custom"


class Recorder:
    def __init__(self, out_dir: Path | None, model: str):
        self.out_dir = out_dir
        self.model = model
        self.index: dict[str, dict] = {}
        self.scenario = ""
        self.servers: dict[str, list[str]] = {}  # scenario -> server args (after -m/--host/--port)

    def save(self, case: str, server: LlamaServer, method: str, path: str, body: Any,
             status: int, raw: bytes, *, trim: bool = False, notes: dict | None = None) -> Any:
        name = f"{self.model}__{case}.json"
        self.scenario = f"{self.model}/{_caller_scenario()}"
        tmp = tempfile.gettempdir()
        self.servers[self.scenario] = [re.sub(r"^" + re.escape(tmp) + r"/[^/]+", "<tmpdir>", a) for a in server.extra]
        try:
            parsed = json.loads(raw)
        except json.JSONDecodeError:
            parsed = None
        if self.out_dir is not None:
            self.out_dir.mkdir(parents=True, exist_ok=True)
            if trim and parsed is not None:
                data = (json.dumps(_trim(parsed), indent=1, ensure_ascii=False) + "\n").encode()
            else:
                data = raw if raw.endswith(b"\n") else raw + b"\n"
            (self.out_dir / name).write_bytes(data)
        self.index[name] = {
            "model": self.model, "endpoint": f"{method} {path}", "request": body, "status": status,
            "raw_bytes": not trim, "server": self.scenario, **(notes or {}),
        }
        return parsed


def _completion(server: LlamaServer, rec: Recorder, case: str, prompt: list[int], **fields) -> dict:
    body = {"prompt": prompt, "n_predict": 8, "cache_prompt": False, **GREEDY, **fields}
    status, raw = server.post("/completion", body)
    resp = json.loads(raw)
    if status != 200:
        raise RuntimeError(f"/completion {case}: HTTP {status}: {raw[:500]!r}")
    t = resp.get("timings", {})
    rows = logprob_rows(resp)
    notes = {
        "tokens": resp.get("tokens"),
        "rows_ids": [r["id"] for r in rows],
        "tokens_without_row": [t for t, r in zip(resp.get("tokens") or [], align_rows(resp.get("tokens") or [], rows))
                               if r is None],
        "cache_n": t.get("cache_n"), "prompt_n": t.get("prompt_n"),
        "tokens_cached": resp.get("tokens_cached"), "tokens_evaluated": resp.get("tokens_evaluated"),
        "floats": float_findings(raw, resp),
    }
    rec.save(case, server, "POST", "/completion", body, status, raw, notes=notes)
    return resp


def make_prompt(n: int, salt: int = 0) -> list[int]:
    """Deterministic token-id prompt: BOS then ids spread over the 768-token vocab."""
    return [1] + [3 + ((37 * i + 101 * salt) % 700) + 50 for i in range(n - 1)]


def probe_basic(binary: Path, gguf: Path, model: str, rec: Recorder, findings: dict, threads: int) -> None:
    args = ["--ctx-size", "2048", "--parallel", "2", "--cache-ram", "0", "-ngl", "0",
            "--threads", str(threads), "--threads-batch", str(threads), "--no-webui", "--alias", model]
    with tempfile.TemporaryDirectory(prefix="llama-slots-") as slot_dir:
        args += ["--slot-save-path", slot_dir + "/"]
        with LlamaServer(binary, gguf, args) as srv:
            st, raw = srv.get("/health")
            rec.save("health", srv, "GET", "/health", None, st, raw)
            st, raw = srv.get("/props")
            props = rec.save("props", srv, "GET", "/props", None, st, raw, trim=True)
            findings["build_info"] = props.get("build_info")
            findings["props_total_slots"] = props.get("total_slots")

            st, raw = srv.get("/v1/models")
            rec.save("v1_models", srv, "GET", "/v1/models", None, st, raw, trim=True)

            text = "the prefix cache is warm"
            body = {"content": text, "add_special": True, "with_pieces": True}
            st, raw = srv.post("/tokenize", body)
            rec.save("tokenize_pieces", srv, "POST", "/tokenize", body, st, raw)
            body = {"content": text, "add_special": True}
            st, raw = srv.post("/tokenize", body)
            tok = rec.save("tokenize", srv, "POST", "/tokenize", body, st, raw)
            body = {"tokens": tok["tokens"]}
            st, raw = srv.post("/detokenize", body)
            rec.save("detokenize", srv, "POST", "/detokenize", body, st, raw)

            p = make_prompt(48)
            r_nc = _completion(srv, rec, "completion_nocache", p, cache_prompt=False)
            r_c1 = _completion(srv, rec, "completion_cache_first", p, cache_prompt=True)
            r_c2 = _completion(srv, rec, "completion_cache_repeat", p, cache_prompt=True)
            ext = p + make_prompt(17, salt=3)[1:]
            r_c3 = _completion(srv, rec, "completion_cache_extend", ext, cache_prompt=True)
            r_e0 = _completion(srv, rec, "completion_extend_nocache", ext, cache_prompt=False)

            # smaller self-consistent capture for unit tests
            _completion(srv, rec, "completion_small", p[:8], n_predict=3, n_probs=3, cache_prompt=False)
            # probabilities instead of logprobs
            _completion(srv, rec, "completion_post_sampling_probs", p, post_sampling_probs=True,
                        cache_prompt=False)
            # samplers without "temperature": temperature 0 has no effect there
            r_tk = _completion(srv, rec, "completion_samplers_topk_only", p, samplers=["top_k"], top_k=40,
                               seed=7, cache_prompt=False)

            body = {"prompt": p, "max_tokens": 8, "logprobs": 5, "temperature": 0.0, "samplers": ["temperature"],
                    "cache_prompt": False}
            st, raw = srv.post("/v1/completions", body)
            r_v1 = json.loads(raw)
            rec.save("v1_completions", srv, "POST", "/v1/completions", body, st, raw,
                     notes={"floats": float_findings(raw, r_v1) if st == 200 else None})

            st, raw = srv.get("/slots")
            rec.save("slots", srv, "GET", "/slots", None, st, raw, trim=True)

            # error shapes: out-of-vocab token id; prompt longer than the slot context
            body = {"prompt": [1, 5, 99999], "n_predict": 2, **GREEDY}
            st, raw = srv.post("/completion", body)
            rec.save("error_bad_token", srv, "POST", "/completion", body, st, raw)
            body = {"prompt": make_prompt(1100), "n_predict": 2, **GREEDY}
            st, raw = srv.post("/completion", body)
            rec.save("error_too_long", srv, "POST", "/completion", body, st, raw)
            body = {"prompt": [1, 5, 99999], "max_tokens": 2, "logprobs": 5, "temperature": 0.0}
            st, raw = srv.post("/v1/completions", body)
            rec.save("v1_error_bad_token", srv, "POST", "/v1/completions", body, st, raw)

            # save the slot that served the last request, restore it into the other one
            used = r_tk["id_slot"]
            other = 1 - used
            body = {"filename": "probe-slot.bin"}
            st, raw = srv.post(f"/slots/{used}?action=save", body)
            rec.save("slot_save", srv, "POST", f"/slots/{used}?action=save", body, st, raw)
            st, raw = srv.post(f"/slots/{other}?action=restore", body)
            rec.save("slot_restore", srv, "POST", f"/slots/{other}?action=restore", body, st, raw)
            st, raw = srv.post(f"/slots/{other}?action=erase", None)
            rec.save("slot_erase", srv, "POST", f"/slots/{other}?action=erase", None, st, raw)

            findings["greedy_tokens"] = r_nc["tokens"]
            findings["bitwise_equal"] = {
                "nocache_vs_cache_first": lp_key(logprob_rows(r_nc)) == lp_key(logprob_rows(r_c1)),
                "nocache_vs_cache_repeat": lp_key(logprob_rows(r_nc)) == lp_key(logprob_rows(r_c2)),
                "extend_cached_vs_nocache": lp_key(logprob_rows(r_c3)) == lp_key(logprob_rows(r_e0)),
                "completion_vs_v1": lp_key(logprob_rows(r_nc)) == lp_key(logprob_rows(r_v1)),
            }
            findings["cache_counts"] = {
                name: {"cache_n": r["timings"]["cache_n"], "prompt_n": r["timings"]["prompt_n"],
                       "tokens_cached": r["tokens_cached"], "tokens_evaluated": r["tokens_evaluated"]}
                for name, r in [("nocache", r_nc), ("cache_first", r_c1), ("cache_repeat", r_c2),
                                ("cache_extend", r_c3), ("extend_nocache", r_e0)]
            }
            findings["top1_is_chosen"] = all(
                row["top_logprobs"][0]["id"] == row["id"] and row["top_logprobs"][0]["logprob"] == row["logprob"]
                for row in logprob_rows(r_nc))
            findings["samplers_topk_only_differs_from_greedy"] = r_tk["tokens"] != r_nc["tokens"]
            findings["log_cache_lines_basic"] = _log_lines(srv.log_text())


def _log_lines(text: str, limit: int = 30,
               pattern: str = r"checkpoint|cache state|prompt cache|restored|n_past|memory_seq_rm|sim_best") -> list[str]:
    """Server log lines about caching, without the timestamp column."""
    keep = [re.sub(r"^[0-9.]+ ", "", ln) for ln in text.splitlines() if re.search(pattern, ln)]
    return keep[:limit]


def probe_checkpoints(binary: Path, gguf: Path, model: str, rec: Recorder, findings: dict, threads: int) -> None:
    """Diverging suffix after a shared prefix, with --ctx-checkpoints; one slot."""
    args = ["--ctx-size", "2048", "--parallel", "1", "--cache-ram", "0", "-ngl", "0",
            "--threads", str(threads), "--threads-batch", str(threads), "--no-webui",
            "--ctx-checkpoints", "8", "--checkpoint-min-step", "0", "--batch-size", "16", "--ubatch-size", "16",
            "-lv", "4", "--alias", model]
    with LlamaServer(binary, gguf, args) as srv:
        a = make_prompt(64)
        b = a[:40] + make_prompt(25, salt=5)[1:]
        r_a = _completion(srv, rec, "ckpt_first", a, cache_prompt=True)
        r_b = _completion(srv, rec, "ckpt_diverge", b, cache_prompt=True)
        r_a2 = _completion(srv, rec, "ckpt_back_to_first", a, cache_prompt=True)
        r_b0 = _completion(srv, rec, "ckpt_diverge_nocache", b, cache_prompt=False)
        # diverge after the last checkpoint (created 4 tokens before the end of `a`):
        # a recurrent/hybrid model restores that checkpoint instead of starting over
        _completion(srv, rec, "ckpt_first_again", a, cache_prompt=True)
        late = a[:62] + make_prompt(9, salt=7)[1:]
        r_l = _completion(srv, rec, "ckpt_diverge_late", late, cache_prompt=True)
        r_l0 = _completion(srv, rec, "ckpt_diverge_late_nocache", late, cache_prompt=False)
        findings["checkpoints"] = {
            "cache_counts": {n: {"cache_n": r["timings"]["cache_n"], "prompt_n": r["timings"]["prompt_n"]}
                             for n, r in [("first", r_a), ("diverge_at_40", r_b), ("back_to_first", r_a2),
                                          ("diverge_at_40_nocache", r_b0), ("diverge_at_62", r_l),
                                          ("diverge_at_62_nocache", r_l0)]},
            "diverge_cached_equals_nocache_bitwise": lp_key(logprob_rows(r_b)) == lp_key(logprob_rows(r_b0)),
            "diverge_late_cached_equals_nocache_bitwise": lp_key(logprob_rows(r_l)) == lp_key(logprob_rows(r_l0)),
            "log": _log_lines(srv.log_text(), 60, r"checkpoint|cached n_tokens"),
        }


def probe_cache_ram(binary: Path, gguf: Path, model: str, rec: Recorder, findings: dict, threads: int) -> None:
    """--cache-ram: prompt A, unrelated prompt B on the same (only) slot, then A again."""
    args = ["--ctx-size", "2048", "--parallel", "1", "--cache-ram", "64", "-ngl", "0",
            "--threads", str(threads), "--threads-batch", str(threads), "--no-webui", "-lv", "4", "--alias", model]
    with LlamaServer(binary, gguf, args) as srv:
        a = make_prompt(64)
        b = make_prompt(64, salt=9)
        r_a = _completion(srv, rec, "cacheram_a", a, cache_prompt=True)
        r_b = _completion(srv, rec, "cacheram_b", b, cache_prompt=True)
        r_a2 = _completion(srv, rec, "cacheram_a_again", a, cache_prompt=True)
        findings["cache_ram"] = {
            "cache_counts": {n: {"cache_n": r["timings"]["cache_n"], "prompt_n": r["timings"]["prompt_n"]}
                             for n, r in [("a", r_a), ("b", r_b), ("a_again", r_a2)]},
            "a_again_equals_a_bitwise": lp_key(logprob_rows(r_a)) == lp_key(logprob_rows(r_a2)),
            "log": _log_lines(srv.log_text(), 40, r"prompt cache|cache state|cached n_tokens|prompt [0-9a-fx]+:|restor|sim_best"),
        }


def run(models: list[tuple[str, Path]], binary: Path, out_dir: Path | None, threads: int) -> dict:
    all_findings: dict[str, Any] = {}
    index: dict[str, dict] = {}
    servers: dict[str, list[str]] = {}
    st = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=60)
    version = (st.stdout + st.stderr).strip()
    for name, gguf in models:
        log(f"probing {name} ({gguf})")
        rec = Recorder(out_dir, name)
        f: dict[str, Any] = {}
        for fn in (probe_basic, probe_checkpoints, probe_cache_ram):
            try:
                fn(binary, gguf, name, rec, f, threads)
            except Exception as e:  # record and go on with the next scenario
                f.setdefault("errors", []).append(f"{fn.__name__}: {type(e).__name__}: {e}"[:2000])
        all_findings[name] = f
        index.update(rec.index)
        servers.update(rec.servers)
    result = {"llama_server_version": version, "binary": str(binary),
              "server_argv": "llama-server -m <gguf> --host 127.0.0.1 --port <free> <servers[...]>",
              "servers": servers, "findings": all_findings, "files": index}
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "INDEX.json").write_text(_scrub(_index_json(result)) + "\n")
    return result


def _index_json(result: dict) -> str:
    """Readable but compact: one line per server config and per captured file."""
    parts = []
    for k, v in result.items():
        if k in ("servers", "files"):
            inner = ",\n".join(f"  {json.dumps(kk)}: {json.dumps(vv, separators=(',', ':'))}" for kk, vv in v.items())
            parts.append(f" {json.dumps(k)}: {{\n{inner}\n }}")
        else:
            parts.append(f" {json.dumps(k)}: " + json.dumps(v, indent=1).replace("\n", "\n "))
    return "{\n" + ",\n".join(parts) + "\n}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="*", help=f"tiny model names (default: {MODELS})")
    ap.add_argument("--gguf", type=Path, help="probe this gguf instead of the tiny models")
    ap.add_argument("--name", default="custom", help="name for --gguf in file names")
    ap.add_argument("--server", type=Path, help="llama-server binary (default: the cached build)")
    ap.add_argument("--out", type=Path, default=DATA_DIR, help=f"output dir (default {DATA_DIR})")
    ap.add_argument("--no-save", action="store_true", help="do not write any file; print findings only")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)

    binary = args.server or find_server()
    if binary is None:
        log("llama-server not built: run scripts/build_llama_server.sh")
        return 2
    if args.gguf:
        models = [(args.name, args.gguf)]
    else:
        models = [(m, model_path(m)) for m in (args.models or MODELS)]
    missing = [str(p) for _, p in models if not p.is_file()]
    if missing:
        log(f"missing gguf {missing}: run scripts/make_tiny_gguf.py")
        return 2
    result = run(models, binary, None if args.no_save else args.out, args.threads)
    print(json.dumps({"llama_server_version": result["llama_server_version"], "findings": result["findings"]},
                     indent=1))
    return 1 if any("errors" in f for f in result["findings"].values()) else 0


if __name__ == "__main__":
    sys.exit(main())
