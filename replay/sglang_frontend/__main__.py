"""`python -m replay.sglang_frontend --profile P [--host H] [--port N] [--fault F] [--model M]
[--seed S] [--api-key K]`: SGLang's own HTTP server with the embedded engine as its scheduler,
until SIGINT, SIGTERM, SIGHUP or its parent's death, which stop its whole process tree
(supervise.py).

Run from any Python: if this one cannot import sglang, the command re-executes itself with the
SGLang environment's interpreter (locate.py), keeping this checkout first on the path. There it
runs the server as a supervised child (the same command, SERVER_ENV set). An SGLang environment
that cannot import SGLang's server is one error line naming the fix, exit 2.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

from replay.engine.config import get_config
from replay.engine.faults import FAULTS
from replay.engine.options import (
    PROFILES, SERVER_ARG_OVERRIDES, add_override_flags, overrides_given, profile_options,
)
from replay.sglang_frontend.args import server_argv, server_env
from replay.sglang_frontend.locate import (
    install_hint, named_venv_elsewhere, rebuild_hint, sglang_python,
)
from replay.sglang_frontend.model_dir import ARCHITECTURE, model_path, write_model_dir
from replay.sglang_frontend.supervise import supervise

REPLAY_ROOT = str(Path(__file__).resolve().parents[2])
REEXEC_ENV = "_GOLDEN_SGLANG_REEXEC"
SERVER_ENV = "_GOLDEN_SGLANG_SERVER"  # set for the supervised child that runs the server
DEFAULT_MODEL_ROOT = Path.home() / ".cache/golden-replay/sglang-models"


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m replay.sglang_frontend", description=__doc__)
    parser.add_argument("--profile", default="reference", choices=sorted(PROFILES))
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=30000)
    parser.add_argument("--fault", choices=sorted(FAULTS), help="inject one cache bug")
    parser.add_argument("--model", help="engine model config name (default tiny)")
    parser.add_argument("--seed", type=int, help="weight seed (default 0)")
    add_override_flags(parser, SERVER_ARG_OVERRIDES)  # carried as SGLang's own flags
    parser.add_argument("--api-key", help="SGLang's --api-key: every request must carry it")
    parser.add_argument("--model-root", type=Path, default=DEFAULT_MODEL_ROOT,
                        help="where the weightless model directory is written")
    parser.add_argument("--log-level", default="warning", help="SGLang's --log-level")
    return parser.parse_args(argv)


def reexec_with_sglang(argv: list[str]) -> None:
    python = sglang_python()
    if python is None or os.environ.get(REEXEC_ENV):  # the named interpreter lacks sglang too
        print(f"error: {install_hint()}", file=sys.stderr)
        sys.exit(2)
    env = dict(os.environ, **{REEXEC_ENV: "1"})
    env["PYTHONPATH"] = os.pathsep.join(p for p in (REPLAY_ROOT, env.get("PYTHONPATH")) if p)
    os.execve(python, [python, "-m", "replay.sglang_frontend", *argv], env)


def declare_state_snapshots() -> None:
    """Tell SGLang's flag resolution that this "platform" snapshots Mamba state.

    SGLang resolves a hybrid model with pages or overlap scheduling to the `extra_buffer` Mamba
    radix-cache strategy and then asserts that the platform can snapshot SSM state, which it
    answers from the device kind (CUDA, HIP, NPU, ...; never CPU). Here the scheduler process is
    the embedded engine, which checkpoints SSM state at every track boundary itself, so the answer
    is yes; everything else in the resolution (`uses_mamba_radix_cache`, the strategy, the checks
    of page size against track interval) stays SGLang's own.
    """
    from sglang.srt.arg_groups import mamba_hook

    mamba_hook._platform_supports_mamba_cache_extra_buffer = lambda: True


def register_architecture() -> None:
    """Register the engine's architecture as a Mamba-hybrid through SGLang's public registry for
    external hybrid models (`configs/linear_attn_model_registry.py`), with NemotronH's config
    class: SGLang then treats it as it treats NemotronH (mamba radix cache, extra_buffer)."""
    from sglang.srt.configs import NemotronHConfig
    from sglang.srt.configs.linear_attn_model_registry import (
        LinearAttnModelSpec,
        register_linear_attn_model,
    )

    register_linear_attn_model(LinearAttnModelSpec(
        config_class=NemotronHConfig,
        backend_class_name="sglang.srt.layers.attention.hybrid_linear_attn_backend.Mamba2AttnBackend",
        arch_names=[ARCHITECTURE],
        uses_mamba_radix_cache=True,
        support_mamba_cache=True,
        support_mamba_cache_extra_buffer=True,
        config_predicate=_is_engine_model,
    ))


def _is_engine_model(config: object) -> bool:
    return ARCHITECTURE in (getattr(config, "architectures", None) or [])


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse(argv)
    try:
        options = profile_options(args.profile, host=args.host, port=args.port, fault=args.fault,
                                  model=args.model, seed=args.seed, **overrides_given(args))
        config = get_config(options.model)
        if options.port == 0:
            raise ValueError("SGLang's server needs a port number (0 is not supported)")
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if importlib.util.find_spec("sglang") is None or named_venv_elsewhere():
        reexec_with_sglang(argv)
    if not os.environ.get(SERVER_ENV):
        env = dict(os.environ, **{SERVER_ENV: "1"})
        env["PYTHONPATH"] = os.pathsep.join(p for p in (REPLAY_ROOT, env.get("PYTHONPATH")) if p)
        return supervise([sys.executable, "-m", "replay.sglang_frontend", *argv], env)
    try:
        launch_server, prepare_server_args, run_scheduler_process = import_sglang_server()
    except ImportError as exc:  # the SGLang environment lacks something its server imports
        print(f"error: {rebuild_hint(exc)}", file=sys.stderr)
        return 2
    write_model_dir(args.model_root, config, options.seed)
    os.chdir(args.model_root)  # model_path is relative: the same name the native engine reports
    os.environ.update(server_env(options))
    sglang_args = server_argv(options, model_path(config, options.seed))
    sglang_args += ["--log-level", args.log_level]
    if args.api_key:
        sglang_args += ["--api-key", args.api_key]
    launch_server(prepare_server_args(sglang_args), run_scheduler_process_func=run_scheduler_process)
    return 0


def import_sglang_server() -> tuple[Any, Any, Any]:
    """SGLang's launch_server and argument parser, and the engine's scheduler entry point, with
    the engine's architecture registered."""
    sys.path.insert(0, REPLAY_ROOT)  # spawned processes inherit sys.path, not the cwd
    from sglang.srt.entrypoints.http_server import launch_server
    from sglang.srt.server_args import prepare_server_args

    from replay.sglang_frontend.scheduler_process import run_scheduler_process

    declare_state_snapshots()
    register_architecture()
    return launch_server, prepare_server_args, run_scheduler_process


if __name__ == "__main__":
    sys.exit(main())
