"""The findings run of real SGLang on a GPU (docs/findings/h200.md), in one command per backend.

    python scripts/gpu_sglang/run_matrix.py --plan h200 --backend fa3 --model DIR --out DIR
    python scripts/gpu_sglang/run_matrix.py --plan cpu --model DIR --out DIR    # rehearsal here

Starts every server of the plan at once (the reference, the cached reference, the HiCache
profiles' control and each HiCache profile: one GPU holds them all, each with a small pool),
records the goldens on the references, replays each on every HiCache server with the control
(`--control-server`), then SGLang's id check, and stops them all. Everything goes through the
library exactly as `golden record` / `golden replay --control-server` would; the equivalent
command lines are written beside each report. Results: OUT/reports/*.json, OUT/summary.json, a
markdown table (OUT/table.md, also printed last) and the servers' logs in OUT/logs/.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import json
import subprocess
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from replay.golden.scenario import build_plan, load_scenario  # noqa: E402
from replay.jobs.session import record_golden, replay_golden  # noqa: E402
from replay.run.recorder import RecordOptions  # noqa: E402
from replay.run.replayer import ReplayOptions  # noqa: E402
from replay.server.launch import launched  # noqa: E402
from replay.server.profile import load_profile  # noqa: E402
from replay.server.target import ServerTarget  # noqa: E402
from replay.server.transport import ClientOptions  # noqa: E402


@dataclass(frozen=True)
class Server:
    role: str  # reference | cached | control | a HiCache profile's short name
    profile: str
    args: tuple[str, ...] = ()


@dataclass(frozen=True)
class Golden:
    name: str
    scenario: str
    on: str  # the role of the server it is recorded on
    reference: str = "cache-off"
    order: tuple[str, ...] = ()  # record and replay schedule (ReplayOptions/RecordOptions)


@dataclass(frozen=True)
class Plan:
    servers: tuple[Server, ...]
    goldens: tuple[Golden, ...]
    tested: tuple[str, ...]  # roles replayed with the control
    prompt_only: tuple[str, ...] = ()  # goldens replayed --repeat 2 --require-tier host
    storage_roles: tuple[str, ...] = ()  # roles with an L3 tier: --require-tier storage there
    id_check: str = "reference"  # the role the SGLang id script runs against
    vocab: int = 4096


GPU_ARGS = ("--cuda-graph-max-bs=16",)
# Four servers started in the same second once collided: one's uvicorn port had meanwhile been
# taken by another's internal port ("[Errno 98] ... address already in use"), and that server
# then hung in "Waiting for application shutdown" instead of exiting. So: starts 4 s apart, a
# start that is not up in 240 s given up, and once retried.
STAGGER = 4.0
START_TIMEOUT = 240.0
# Every server's pool is capped so that all of them fit one GPU at once whatever order they
# start in (SGLang sizes an uncapped pool from the memory free when it starts); the control's cap
# (the cached references are recorded on it) still holds every token of these scenarios, so it
# evicts nothing. (The run of 2026-12-02 had the control at the seed's tight 4096 tokens and a
# separate big-pool server for the cached references: docs/findings/h200.md.)
BIG_POOL = ("--max-total-tokens=262144",)
INTERLEAVE = ("interleave",)
GOLDENS = (
    Golden("prompt", "cpu-prompt-reuse", "reference", order=INTERLEAVE),
    Golden("branching", "hicache-branching", "reference"),
    Golden("quick", "ci-quick", "reference"),
    Golden("branching-cached", "hicache-branching", "control", reference="cached"),
    Golden("quick-cached", "ci-quick", "control", reference="cached"),
)
PLANS = {
    "h200": Plan(
        servers=(
            Server("reference", "sglang-reference", GPU_ARGS + BIG_POOL),
            Server("control", "sglang-radix", GPU_ARGS + BIG_POOL),
            Server("seed", "sglang-hicache-seed", GPU_ARGS),
            Server("kernel-io", "sglang-hicache-kernel-io", GPU_ARGS),
            Server("write-back", "sglang-hicache-write-back", GPU_ARGS),
            Server("layer-first", "sglang-hicache-layer-first", GPU_ARGS),
            Server("file", "sglang-hicache-file-storage", GPU_ARGS),
        ),
        goldens=GOLDENS,
        tested=("seed", "kernel-io", "write-back", "layer-first", "file"),
        prompt_only=("prompt",),
        storage_roles=("file",),
    ),
    # The tiny hybrid (Qwen3-Next: linear attention + full attention, a Mamba state pool) with
    # the seed's HiCache, its control and both references.
    "h200-hybrid": Plan(
        servers=(
            Server("reference", "sglang-reference", GPU_ARGS + BIG_POOL),
            Server("control", "sglang-radix", GPU_ARGS + BIG_POOL),
            Server("seed", "sglang-hicache-seed", GPU_ARGS),
        ),
        goldens=GOLDENS[:2] + GOLDENS[3:4],
        tested=("seed",),
        prompt_only=("prompt",),
    ),
    # The same run on SGLang's real CPU server (a rehearsal of this script, no GPU): its
    # reference, radix and HiCache profiles (docs/sglang-cpu.md).
    "cpu": Plan(
        servers=(
            Server("reference", "sglang-cpu-reference"),
            Server("cached", "sglang-cpu-radix", ("--max-total-tokens=65536",)),
            Server("control", "sglang-cpu-radix"),
            Server("seed", "sglang-cpu-hicache"),
        ),
        goldens=(Golden("prompt", "cpu-prompt-reuse", "reference", order=INTERLEAVE),
                 Golden("branching", "cpu-branching", "reference"),
                 Golden("branching-cached", "cpu-branching", "cached", reference="cached")),
        tested=("seed",),
        prompt_only=("prompt",),
    ),
    # The quickest rehearsal: the embedded engine's profiles (exact by construction: all pass).
    "embedded": Plan(
        servers=(
            Server("reference", "embedded-reference"),
            Server("cached", "embedded-radix"),
            Server("control", "embedded-radix"),
            Server("seed", "embedded-hicache"),
            Server("file", "embedded-hicache-storage"),
        ),
        goldens=(Golden("prompt", "cpu-prompt-reuse", "reference", order=INTERLEAVE),
                 Golden("branching", "cpu-branching", "reference"),
                 Golden("branching-cached", "cpu-branching", "cached", reference="cached")),
        tested=("seed", "file"),
        prompt_only=("prompt",),
        storage_roles=("file",),
        id_check="",
    ),
}


class Rows(list):
    """The results, written to OUT/summary.json after every job and printed as one line each,
    so a run stopped at its time limit still leaves what it did."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path

    def append(self, row: dict[str, Any]) -> None:  # type: ignore[override]
        super().append(row)
        self.path.write_text(json.dumps(list(self), indent=1))
        short = {k: row[k] for k in ("job", "verdict", "failed", "tier_only", "also_on_control",
                                     "max_ulp", "error", "seconds", "exit") if k in row}
        print(json.dumps(short)[:400], flush=True)


@dataclass
class Fleet:
    """Servers started at once (each in a thread: a start waits for health and warm-up), all
    stopped at the end; a server that fails to start is reported and left out."""

    urls: dict[str, str] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    stack: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)

    def start(self, servers: tuple[Server, ...], model: str, backend: str | None,
              logs: Path) -> None:
        def one(s: Server, delay: float) -> tuple[Server, Any, str]:
            time.sleep(delay)  # staggered: servers picking ports at once collided (see below)
            profile = replace(load_profile(s.profile), startup_timeout=START_TIMEOUT)
            for attempt in (1, 2):  # a port another server took meanwhile: once more
                log = logs / f"{s.role}{'' if attempt == 1 else '-retry'}.log"
                cm = launched(profile, model=model, log_path=log, extra_args=s.args,
                              attention_backend=backend)
                try:
                    return s, cm, cm.__enter__()
                except Exception:  # noqa: BLE001
                    if attempt == 2:
                        raise
            raise AssertionError("unreachable")

        with concurrent.futures.ThreadPoolExecutor(len(servers)) as pool:
            futures = {pool.submit(one, s, STAGGER * i): s for i, s in enumerate(servers)}
            for future in concurrent.futures.as_completed(futures):
                s = futures[future]
                try:
                    _, cm, url = future.result()
                except Exception as exc:  # noqa: BLE001 - reported, the others go on
                    self.errors[s.role] = " ".join(str(exc).split())[:600]
                    continue
                self.stack.push(lambda *exc, cm=cm: cm.__exit__(*exc))
                self.urls[s.role] = url

    def __enter__(self) -> "Fleet":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stack.close()


def command_line(kind: str, golden: Path, role: str, extra: list[str]) -> str:
    return f"golden {kind} {golden} --server <{role}> " + " ".join(extra)


def record_all(plan: Plan, fleet: Fleet, out: Path, rows: list[dict[str, Any]]) -> dict[str, Path]:
    made: dict[str, Path] = {}
    for g in plan.goldens:
        url = fleet.urls.get(g.on)
        if url is None:
            rows.append({"job": f"record {g.name}", "error": f"no {g.on} server"})
            continue
        path = out / "goldens" / f"{g.name}.zarr"
        options = RecordOptions(schedule=g.order[0] if g.order else "lockstep",
                                reference=g.reference)
        started = time.monotonic()
        try:
            golden = record_golden(build_plan(load_scenario(g.scenario)), path,
                                   ServerTarget(url=url), options, ClientOptions(), api="sglang",
                                   force=True)
            made[g.name] = path
            rows.append({"job": f"record {g.name}", "scenario": g.scenario, "on": g.on,
                         "reference": g.reference, "requests": len(golden.requests),
                         "seconds": round(time.monotonic() - started, 1),
                         "hits": sorted({r.cached_tokens for r in golden.requests}),
                         "misreported_prompt_ids": golden.meta.get("server_misreported_prompt_ids", 0)})
        except Exception as exc:  # noqa: BLE001
            rows.append({"job": f"record {g.name}", "error": " ".join(str(exc).split())[:600]})
    return made


def replay_all(plan: Plan, fleet: Fleet, goldens: dict[str, Path], out: Path,
               rows: list[dict[str, Any]]) -> None:
    control = fleet.urls.get("control")
    for role in plan.tested + ("control",):
        url = fleet.urls.get(role)
        if url is None:
            continue
        for name, path in goldens.items():
            extra: dict[str, Any] = {}
            flags: list[str] = []
            if name in plan.prompt_only:
                extra = {"schedule": "interleave", "repeat": 2}
                flags = ["--schedule interleave --repeat 2"]
                if role != "control":  # the control has no tier to require
                    tier = "storage" if role in plan.storage_roles else "host"
                    extra["require_tier"] = tier
                    flags.append(f"--require-tier {tier}")
            options = ReplayOptions(**extra)
            twin = ServerTarget(url=control) if control and role != "control" else None
            flags += ["--control-server <control>"] if twin else []
            started = time.monotonic()
            doc = replay_golden(path, ServerTarget(url=url), options,
                                ClientOptions(concurrency=1 if name in plan.prompt_only else 16),
                                api="sglang", control=twin, name=name)
            report = out / "reports" / f"{role}__{name}.json"
            report.write_text(json.dumps(doc, indent=1))
            rows.append(row_of(role, name, doc, time.monotonic() - started,
                               command_line("replay", path, role, flags)))


def row_of(role: str, golden: str, doc: dict[str, Any], seconds: float, cmd: str) -> dict[str, Any]:
    s = doc.get("summary") or {}
    control = doc.get("control") or {}
    failing = [r for r in doc.get("requests", []) if not r["passed"]]
    firsts = sorted({(r.get("first_divergence") or {}).get("position") for r in failing
                     if r.get("first_divergence")} - {None})
    return {
        "job": f"replay {golden} on {role}", "server": role, "golden": golden,
        "verdict": doc["verdict"], "error": doc.get("error"),
        "requests": s.get("requests"), "repeats": s.get("repeats"),
        "failed": s.get("requests_failed"), "cache_misses": s.get("cache_misses"),
        "max_ulp": s.get("max_ulp"), "hit_lengths": s.get("cache_hit_lengths"),
        "tiers": s.get("cached_tokens_by_tier"), "first_positions": firsts[:6],
        "tier_only": control.get("failed_on_tier_only"),
        "also_on_control": control.get("failed_on_control_too"),
        "same_bits": control.get("same_bits_on_control"),
        "control_verdict": control.get("verdict"),
        "server_id_mismatches": s.get("server_id_mismatches"),
        "seconds": round(seconds, 1), "command": cmd,
    }


def id_check(plan: Plan, fleet: Fleet, rows: list[dict[str, Any]]) -> None:
    url = fleet.urls.get(plan.id_check)
    if url is None:
        return
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "sglang_last_id_repro.py"),
                           url, str(plan.vocab)], capture_output=True, text=True, timeout=120)
    rows.append({"job": f"id check on {plan.id_check}", "exit": done.returncode,
                 "output": (done.stdout + done.stderr).strip()})


def sglang_determinism(fleet: Fleet, role: str, rows: list[dict[str, Any]]) -> None:
    """SGLang's own determinism test (its prefix mode, with logprobs) on the same server."""
    url = fleet.urls.get(role)
    if url is None:
        return
    port = url.rsplit(":", 1)[1]
    cmd = [sys.executable, "-m", "sglang.test.test_deterministic", "--test-mode", "prefix",
           "--n-start", "1", "--n-trials", "8", "--return-logprob", "--port", port]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=150)
        text, code = done.stdout + done.stderr, done.returncode
    except subprocess.TimeoutExpired as exc:
        text, code = f"timed out after 150 s: {(exc.stdout or b'')[-2000:]!r}", 124
    keep = [ln for ln in text.splitlines() if any(k in ln for k in (
        "Prompt", "identical", "mismatch", "differ", "Error", "error", "Trial 8"))]
    rows.append({"job": f"sglang test_deterministic prefix on {role}", "exit": code,
                 "command": " ".join(cmd[1:]), "lines": keep[-30:], "tail": text[-1500:]})


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| server | golden | verdict | failed | tier's alone | also on control (same bits) "
             "| max ulp | hit lengths | tokens by tier | first positions | s |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        if "server" not in r:
            continue
        if r.get("error") and r["verdict"] == "error":
            lines.append(f"| {r['server']} | {r['golden']} | error | {r['error'][:140]} |"
                         " | | | | | | |")
            continue
        also = f"{r['also_on_control']} ({r['same_bits']})" if r["also_on_control"] is not None else "-"
        tier = r["tier_only"] if r["tier_only"] is not None else "-"
        lines.append(f"| {r['server']} | {r['golden']} | {r['verdict']} | {r['failed']}/"
                     f"{r['requests'] * r['repeats']} | {tier} | {also} | {r['max_ulp']} | "
                     f"{r['hit_lengths']} | {r['tiers']} | {r['first_positions']} | {r['seconds']} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--plan", choices=sorted(PLANS), required=True)
    ap.add_argument("--backend", default=None, help="attention backend (GPU plans)")
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--roles", default=None, help="only these server roles (comma-separated)")
    ap.add_argument("--sglang-determinism", default=None, metavar="ROLE",
                    help="also run SGLang's own determinism test (prefix mode) on this server")
    args = ap.parse_args()
    plan = PLANS[args.plan]
    servers = plan.servers
    if args.roles:
        keep = set(args.roles.split(","))
        servers = tuple(s for s in servers if s.role in keep)
    for sub in ("reports", "goldens", "logs"):
        (args.out / sub).mkdir(parents=True, exist_ok=True)
    rows = Rows(args.out / "summary.json")
    started = time.monotonic()
    with Fleet() as fleet:
        fleet.start(servers, args.model, args.backend, args.out / "logs")
        rows.append({"job": "start", "seconds": round(time.monotonic() - started, 1),
                     "up": sorted(fleet.urls), "failed": fleet.errors})
        print(f"servers up after {rows[0]['seconds']} s: {sorted(fleet.urls)}; "
              f"failed: {fleet.errors}", flush=True)
        goldens = record_all(plan, fleet, args.out, rows)
        replay_all(plan, fleet, goldens, args.out, rows)
        id_check(plan, fleet, rows)
        if args.sglang_determinism:
            sglang_determinism(fleet, args.sglang_determinism, rows)
    rows.append({"job": "total", "seconds": round(time.monotonic() - started, 1)})
    text = table(rows)
    (args.out / "table.md").write_text(text + "\n")
    print(text)
    for r in rows:
        if "server" not in r:
            print(json.dumps(r)[:800])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
