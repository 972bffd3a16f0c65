"""The plans of the findings run (run_matrix.py): which servers start, which goldens are recorded
on which, and what is replayed where with which options. Declarations and pure functions only,
so a plan can be read and tested here, without a GPU (tests/unit/scripts/test_gpu_matrix.py).

A server is a launch profile or a topology (workers behind the real sglang-router,
docs/topologies.md: the replay's report then says which worker served each request). Every
server a plan starts gets MULTICAST_OFF in its environment, whatever its profile says.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Server:
    role: str  # reference | cached | control | a HiCache profile's short name | a topology's
    profile: str  # a launch profile or a topology
    args: tuple[str, ...] = ()  # appended to its argv (a topology: to every worker's)


@dataclass(frozen=True)
class Golden:
    name: str
    scenario: str
    on: str  # the role of the server it is recorded on
    reference: str = "cache-off"
    order: tuple[str, ...] = ()  # record and replay schedule (ReplayOptions/RecordOptions)
    # Recorded at other numerics than the servers it is replayed on (a TP 1 golden replayed at
    # TP 2: tp_size is a numerics field, replay/judge/numerics.py), so every replay of it passes
    # --allow-numerics-mismatch; its report's `numerics.differing` names the field.
    other_numerics: bool = False


@dataclass(frozen=True)
class Plan:
    servers: tuple[Server, ...]
    goldens: tuple[Golden, ...]
    tested: tuple[str, ...]  # roles every golden is replayed on, each with the control
    prompt_only: tuple[str, ...] = ()  # goldens replayed --repeat 2 --require-tier host
    storage_roles: tuple[str, ...] = ()  # roles with an L3 tier: --require-tier storage there
    id_check: str = "reference"  # the role the SGLang id script runs against
    vocab: int = 4096
    control: str = "control"  # the role of the tested servers' control
    # (role, golden) replayed without a control besides: the TP 2 reference on the TP 1 goldens
    also: tuple[tuple[str, str], ...] = ()
    gpus: int = 0  # GPUs the plan needs (checked before anything starts)

    def replays(self) -> list[tuple[str, str, bool]]:
        """(role, golden, with the control) of every replay, in the order they run."""
        done = [(role, g.name, True) for role in self.tested for g in self.goldens]
        done += [(self.control, g.name, False) for g in self.goldens]
        return done + [(role, name, False) for role, name in self.also]


def replay_settings(plan: Plan, role: str, golden: str) -> tuple[dict[str, Any], list[str]]:
    """The ReplayOptions fields of one replay, and the same as `golden replay` flags."""
    g = next(g for g in plan.goldens if g.name == golden)
    extra: dict[str, Any] = {}
    flags: list[str] = []
    if golden in plan.prompt_only:
        extra = {"schedule": "interleave", "repeat": 2}
        flags = ["--schedule interleave --repeat 2"]
        if role in plan.tested:  # the control and the references have no tier to require
            tier = "storage" if role in plan.storage_roles else "host"
            extra["require_tier"] = tier
            flags.append(f"--require-tier {tier}")
    if g.other_numerics:
        extra["allow_numerics_mismatch"] = True
        flags.append("--allow-numerics-mismatch")
    return extra, flags


# The two-GPU kinds' rule (/work/.library/device/KINDS.md): NVLink multicast stays off in NCCL,
# PyTorch and NVSHMEM (a program using it can put the host's GPUs, which others share, out of
# service), also in programs started with an environment of their own. run_matrix.py sets these
# in its own environment (SGLang's scheduler processes, the id check and SGLang's test inherit
# it) and gives them to every server as its launch's own variables, over any profile's `env`.
MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                 "NVSHMEM_DISABLE_NVLS": "1"}
# SGLang 0.5.17 turns NVLS back on whatever the environment says when given --enable-nccl-nvls
# or --enable-symm-mem (entrypoints/engine.py sets NCCL_NVLS_ENABLE from them), and
# --enable-torch-symm-mem uses PyTorch's symmetric memory: a server with any of them is refused.
MULTICAST_FLAGS = ("--enable-nccl-nvls", "--enable-symm-mem", "--enable-torch-symm-mem")


def multicast_flags(words: list[str]) -> list[str]:
    """The words of an argv that would turn NVLink multicast on."""
    return [w for w in words if w in MULTICAST_FLAGS or w.split("=")[0] in MULTICAST_FLAGS]


GPU_ARGS = ("--cuda-graph-max-bs=16",)
# Every server's pool is capped so that all of them fit one GPU at once whatever order they
# start in (SGLang sizes an uncapped pool from the memory free when it starts); the control's cap
# (the cached references are recorded on it) still holds every token of these scenarios, so it
# evicts nothing. (The run of 2026-12-02 had the control at the seed's tight 4096 tokens and a
# separate big-pool server for the cached references: docs/findings/h200.md.)
BIG_POOL = ("--max-total-tokens=262144",)
TP1, TP2 = ("--tp-size=1",), ("--tp-size=2",)
INTERLEAVE = ("interleave",)
HICACHE = (("seed", "sglang-hicache-seed"), ("kernel-io", "sglang-hicache-kernel-io"),
           ("write-back", "sglang-hicache-write-back"),
           ("layer-first", "sglang-hicache-layer-first"), ("file", "sglang-hicache-file-storage"))
GOLDENS = (
    Golden("prompt", "cpu-prompt-reuse", "reference", order=INTERLEAVE),
    Golden("branching", "hicache-branching", "reference"),
    Golden("quick", "ci-quick", "reference"),
    Golden("branching-cached", "hicache-branching", "control", reference="cached"),
    Golden("quick-cached", "ci-quick", "control", reference="cached"),
)
CPU_GOLDENS = (Golden("prompt", "cpu-prompt-reuse", "reference", order=INTERLEAVE),
               Golden("branching", "cpu-branching", "reference"),
               Golden("branching-cached", "cpu-branching", "cached", reference="cached"))
EMBEDDED_REFERENCES = (Server("reference", "embedded-reference"),
                       Server("cached", "embedded-radix"), Server("control", "embedded-radix"))
PLANS = {
    "h200": Plan(
        servers=(Server("reference", "sglang-reference", GPU_ARGS + BIG_POOL),
                 Server("control", "sglang-radix", GPU_ARGS + BIG_POOL),
                 *(Server(role, profile, GPU_ARGS) for role, profile in HICACHE)),
        goldens=GOLDENS,
        tested=tuple(role for role, _ in HICACHE),
        prompt_only=("prompt",),
        storage_roles=("file",),
        gpus=1,
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
        gpus=1,
    ),
    # Two GPUs, tensor parallelism 2 (issue 37): the prompt-only and multi-turn goldens recorded
    # on a TP 1 and a TP 2 reference, the cached one on the TP 2 control; every golden replayed
    # on each HiCache profile at TP 2 with the TP 2 control, and the TP 1 goldens also on the
    # TP 2 reference (cache off: what TP 2 alone does to the bits). A TP 1 golden's replays
    # allow the tp_size mismatch; a TP 2 golden's are judged at equal numerics, bit for bit.
    "h200x2-tp2": Plan(
        servers=(Server("reference-tp1", "sglang-reference", GPU_ARGS + BIG_POOL + TP1),
                 Server("reference-tp2", "sglang-reference", GPU_ARGS + BIG_POOL + TP2),
                 Server("control", "sglang-radix", GPU_ARGS + BIG_POOL + TP2),
                 *(Server(role, profile, GPU_ARGS + TP2) for role, profile in HICACHE)),
        goldens=(
            Golden("prompt-tp1", "cpu-prompt-reuse", "reference-tp1", order=INTERLEAVE,
                   other_numerics=True),
            Golden("branching-tp1", "hicache-branching", "reference-tp1", other_numerics=True),
            Golden("prompt-tp2", "cpu-prompt-reuse", "reference-tp2", order=INTERLEAVE),
            Golden("branching-tp2", "hicache-branching", "reference-tp2"),
            Golden("branching-cached-tp2", "hicache-branching", "control", reference="cached"),
        ),
        tested=tuple(role for role, _ in HICACHE),
        prompt_only=("prompt-tp1", "prompt-tp2"),
        storage_roles=("file",),
        id_check="reference-tp2",
        also=(("reference-tp2", "prompt-tp1"), ("reference-tp2", "branching-tp1")),
        gpus=2,
    ),
    # Two GPUs, data parallelism (issue 37): two TP 1 HiCache workers, worker i on GPU i, behind
    # the real sglang-router with cache_aware routing, without and with one shared L3 directory
    # (the file backend); the references and the control are single servers on GPU 0. Each
    # replay's report says which worker served each request (docs/topologies.md).
    "h200x2-dp": Plan(
        servers=(Server("reference", "sglang-reference", GPU_ARGS + BIG_POOL),
                 Server("control", "sglang-radix", GPU_ARGS + BIG_POOL),
                 Server("dp", "router-cache-aware-gpu", GPU_ARGS),
                 Server("dp-shared", "router-cache-aware-gpu-shared-storage", GPU_ARGS)),
        goldens=GOLDENS,
        tested=("dp", "dp-shared"),
        prompt_only=("prompt",),
        gpus=2,
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
        goldens=CPU_GOLDENS,
        tested=("seed",),
        prompt_only=("prompt",),
    ),
    # The quickest rehearsal: the embedded engine's profiles (exact by construction: all pass).
    "embedded": Plan(
        servers=(*EMBEDDED_REFERENCES, Server("seed", "embedded-hicache"),
                 Server("file", "embedded-hicache-storage")),
        goldens=CPU_GOLDENS,
        tested=("seed", "file"),
        prompt_only=("prompt",),
        storage_roles=("file",),
        id_check="",
    ),
    # h200x2-dp's shape on the embedded engine and the real router (a rehearsal, no GPU): two
    # embedded HiCache workers behind cache_aware routing, without and with a shared L3.
    "embedded-dp": Plan(
        servers=(*EMBEDDED_REFERENCES, Server("dp", "router-cache-aware"),
                 Server("dp-shared", "router-cache-aware-shared-storage")),
        goldens=CPU_GOLDENS,
        tested=("dp", "dp-shared"),
        prompt_only=("prompt",),
        id_check="",
    ),
}
