"""`python -m replay.sglang_cpu SGLANG_SERVER_ARGS...`: SGLang 0.5.23's real server on the CPU,
for testing: its own `launch_server` with its own Scheduler (`run_scheduler_process`), after the
CPU patches (patches.py) are applied in the scheduler process. The arguments are SGLang's, passed
through unchanged; `--device cpu` is added when absent. `--golden-l3-service NAME` (ours, taken
out before SGLang sees the arguments) first starts the server an L3 backend needs
(l3_services.py) and passes SGLang its address.

Run from any Python: without sglang and sgl_kernel here, the command re-executes itself with the
interpreter of scripts/install_sglang_cpu.sh's venv, keeping this checkout first on the path.
SGLANG_USE_CPU_ENGINE=1 (SGLang's own switch to its CPU paths) and OMP_NUM_THREADS=1 (unless set)
are put in the environment before SGLang is imported.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from replay.sglang_cpu.locate import cpu_python, has_server_packages, install_hint

REPLAY_ROOT = str(Path(__file__).resolve().parents[2])
REEXEC_ENV = "_GOLDEN_SGLANG_CPU_REEXEC"


def reexec(argv: list[str]) -> None:
    python = cpu_python()
    if python is None or os.environ.get(REEXEC_ENV):
        print(f"error: {install_hint()}", file=sys.stderr)
        sys.exit(2)
    env = dict(os.environ, **{REEXEC_ENV: "1"})
    env["PYTHONPATH"] = os.pathsep.join(p for p in (REPLAY_ROOT, env.get("PYTHONPATH")) if p)
    os.execve(python, [python, "-m", "replay.sglang_cpu", *argv], env)


def server_argv(argv: list[str]) -> list[str]:
    return argv if "--device" in argv else [*argv, "--device", "cpu"]


def model_path(argv: list[str]) -> str:
    for i, arg in enumerate(argv):
        if arg == "--model-path" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--model-path="):
            return arg.split("=", 1)[1]
    return ""


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not has_server_packages():
        reexec(argv)
    os.environ["SGLANG_USE_CPU_ENGINE"] = "1"
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.path.insert(0, REPLAY_ROOT)  # spawned processes inherit sys.path, not the cwd

    from sglang.srt.entrypoints.http_server import launch_server
    from sglang.srt.server_args import prepare_server_args

    import sgl_kernel  # noqa: F401  (registers the CPU ops that were built)

    from replay.sglang_cpu.hybrid import refusal, registered_ops
    from replay.sglang_cpu.l3_services import split_service, with_service
    from replay.sglang_cpu.patches import log
    from replay.sglang_cpu.scheduler import run_scheduler_process

    stop = refusal(model_path(argv), registered_ops())
    if stop is not None:
        print(f"error: {stop}", file=sys.stderr)
        return 2
    service, argv = split_service(argv)
    if service is not None:
        _, argv = with_service(service, argv)  # its child: SGLang's shutdown ends it with us
    log("launcher: SGLang's launch_server with replay.sglang_cpu.scheduler.run_scheduler_process "
        "(SGLang's own, after the CPU patches)")
    launch_server(prepare_server_args(server_argv(argv)),
                  run_scheduler_process_func=run_scheduler_process)
    return 0


if __name__ == "__main__":
    sys.exit(main())
