"""Helpers for the launcher, matrix, update and plugin tests: fake profiles and small goldens."""

from __future__ import annotations

from pathlib import Path

from replay.jobs import session
from replay.golden.scenario import ScenarioSpec, build_plan
from tests.support.stub_server import StubConfig, StubServer

FAKE_DIR = Path(__file__).resolve().parent

# Two groups of two branches, one follow-up turn: 8 requests, small enough for a 2-core machine.
SMALL = ScenarioSpec(name="small", groups=2, branches=2, prefix_len=40, suffix_len=8, turns=1,
                     turn_suffix_len=4, max_new_tokens=8, top_k=5, seed=3)


def fake_profile(directory: Path, script: str, *, name: str | None = None, args: tuple[str, ...] = (),
                 startup_timeout: float = 20.0, stop_timeout: float = 5.0, warmup: bool = True) -> str:
    """A user TOML profile running one of the fake servers; returns its path."""
    name = name or Path(script).stem.replace("_", "-")
    argv = ["{python}", str(FAKE_DIR / script), "--host", "{host}", "--port", "{port}", *args]
    quoted = ", ".join(f'"{a}"' for a in argv)
    path = Path(directory) / f"{name}.toml"
    path.write_text(
        f'description = "fake: {script}"\n'
        f"command = [{quoted}]\n"
        f"startup_timeout = {startup_timeout}\n"
        f"stop_timeout = {stop_timeout}\n"
        f"warmup = {'true' if warmup else 'false'}\n"
    )
    return str(path)


def record_golden(path: Path, spec: ScenarioSpec = SMALL, config: StubConfig | None = None) -> Path:
    """Record `spec` from an in-process cache-disabled stub into the golden at `path`."""
    with StubServer(config or StubConfig(radix=False)) as stub:
        session.record_golden(build_plan(spec), path, session.ServerTarget(url=stub.url))
    return path
