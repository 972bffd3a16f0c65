"""Which attention backend an SGLang launch profile pins, chosen per GPU generation.

Why pin it at all: with `--enable-deterministic-inference` and no `--attention-backend`, SGLang
0.5.23 picks `flashinfer` on Blackwell; flashinfer is not a radix-capable deterministic backend, so
SGLang turns the radix cache off, and `--enable-hierarchical-cache` then refuses to start. And a
reference and a replay that run different attention kernels differ in their bits with no cache
bug. So the launcher fills the same backend into the reference and every replay profile (the
`{attention_backend}` placeholder): the user's `--attention-backend`, else the default for the
GPU it can see:

| GPU (compute capability) | default | why |
| --- | --- | --- |
| Blackwell data centre (sm100, sm103, sm110) | `fa4` | what SGLang's own bit-exact HiCache test runs on B200 |
| Hopper (sm90) | `fa3` | SGLang's own deterministic default there, radix-capable |
| anything else, or no GPU visible | `triton` | radix-capable and deterministic everywhere; FA4 has no sm120 kernels |

The GPU is read with `nvidia-smi --query-gpu=compute_cap` (the lowest generation when several
differ), else from torch when it is installed with CUDA. Nothing here starts a server.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass

Capability = tuple[int, int]
FA4_MAJORS = (10, 11)  # sm100/sm103 (B200, B300, GB200) and sm110 (Thor)
HOPPER_MAJOR = 9


@dataclass(frozen=True)
class AttentionChoice:
    """The backend a launch pins, and why: printed at launch and written into the server log."""

    backend: str
    reason: str

    def line(self) -> str:
        return f"attention backend {self.backend} ({self.reason})"


def default_backend(capability: Capability | None) -> str:
    if capability is None:
        return "triton"
    if capability[0] in FA4_MAJORS:
        return "fa4"
    if capability[0] == HOPPER_MAJOR:
        return "fa3"
    return "triton"


def choose_attention_backend(given: str | None,
                             probe: Callable[[], tuple[Capability | None, str]] | None = None
                             ) -> AttentionChoice:
    """The user's choice when given, else the default for the GPU `probe` sees."""
    if given:
        return AttentionChoice(given, "given with --attention-backend")
    capability, source = (probe or visible_gpu)()
    backend = default_backend(capability)
    if capability is None:
        return AttentionChoice(backend, f"default: {source}")
    sm = f"sm{capability[0]}{capability[1]}"
    return AttentionChoice(backend, f"default for {sm}, seen by {source}")


def visible_gpu() -> tuple[Capability | None, str]:
    """The lowest compute capability among the visible GPUs, and what said so."""
    found = _from_nvidia_smi()
    if found:
        return min(found), "nvidia-smi"
    capability = _from_torch()
    if capability is not None:
        return capability, "torch.cuda"
    return None, "no GPU visible (no nvidia-smi, no CUDA torch)"


def parse_compute_caps(text: str) -> list[Capability]:
    """`nvidia-smi --query-gpu=compute_cap --format=csv,noheader` output: one `10.0` per GPU."""
    caps = []
    for line in text.splitlines():
        major, dot, minor = line.strip().partition(".")
        if dot and major.isdigit() and minor.isdigit():
            caps.append((int(major), int(minor)))
    return caps


def _from_nvidia_smi() -> list[Capability]:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return []
    try:
        done = subprocess.run([exe, "--query-gpu=compute_cap", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return parse_compute_caps(done.stdout) if done.returncode == 0 else []


def _from_torch() -> Capability | None:
    try:
        import torch
    except ImportError:
        return None
    try:
        if not torch.cuda.is_available():
            return None
        caps = [tuple(torch.cuda.get_device_capability(i)) for i in range(torch.cuda.device_count())]
    except (RuntimeError, AssertionError):
        return None
    return min(caps) if caps else None  # type: ignore[return-value]
