"""llama.cpp's own HTTP server from a prebuilt wheel, started with llama-server's command line.

Why: compiling llama-server is about 26 CPU-minutes, half of what the README's test command
costs a fresh 2-core machine. The `xllamacpp` wheel on PyPI (pinned in
scripts/build_llama_server.sh) is llama.cpp compiled as a Python extension, its server included:
`xllamacpp.Server(params)` runs llama.cpp's own `server_context` and HTTP routes on a port. This
script is the command-line door to it that the launch profiles and tests already use for the
compiled binary: it reads the llama-server flags they pass, sets the same `common_params` fields
llama.cpp's argument parser sets, serves until SIGTERM or SIGINT, and stops the server cleanly.

Only the flags listed in FLAGS are understood; any other is refused (exit 2) with the hint to
build the real binary (`bash scripts/build_llama_server.sh --from-source`), so a flag is never
silently dropped. Defaults are llama-server's, not the wheel's: llama-server's parser starts
`--parallel` at auto (4 slots, unified KV), the wheel's `CommonParams()` at 1.

Runs on the interpreter that has xllamacpp (the wrapper scripts/build_llama_server.sh writes
as `$GOLDEN_LLAMA_CACHE/llama-server`); imports nothing from golden-replay.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from importlib import metadata

HINT = "this server is the prebuilt xllamacpp wheel; for every flag build the real binary: " \
       "bash scripts/build_llama_server.sh --from-source"
FLASH_ATTN = {"on": "LLAMA_FLASH_ATTN_TYPE_ENABLED", "off": "LLAMA_FLASH_ATTN_TYPE_DISABLED",
              "auto": "LLAMA_FLASH_ATTN_TYPE_AUTO"}


class Refusing(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line and exit 2, as llama-server would refuse
        print(f"llama-server (prebuilt): {message}; {HINT}", file=sys.stderr)
        raise SystemExit(2)


def parser() -> argparse.ArgumentParser:
    p = Refusing(prog="llama-server", add_help=True, allow_abbrev=False,
                 description="llama.cpp's server (xllamacpp wheel) with a subset of llama-server's flags")
    p.add_argument("--version", action="store_true")
    p.add_argument("-m", "--model")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8080)
    p.add_argument("-np", "--parallel", type=int, default=-1)
    p.add_argument("-c", "--ctx-size", type=int)
    p.add_argument("-b", "--batch-size", type=int)
    p.add_argument("-ub", "--ubatch-size", type=int)
    p.add_argument("-t", "--threads", type=int)
    p.add_argument("-tb", "--threads-batch", type=int)
    p.add_argument("-ngl", "--n-gpu-layers", "--gpu-layers", type=int)
    p.add_argument("-fa", "--flash-attn", choices=sorted(FLASH_ATTN))
    p.add_argument("-cram", "--cache-ram", type=int)
    p.add_argument("--ctx-checkpoints", type=int)
    p.add_argument("--checkpoint-min-step", type=int)
    p.add_argument("--slot-save-path")
    p.add_argument("-a", "--alias")
    p.add_argument("-lv", "--verbosity", "--log-verbosity", type=int)
    p.add_argument("--no-webui", action="store_true")
    return p


def params_from(args: argparse.Namespace, xlc):  # xlc: the xllamacpp module
    """The common_params llama-server's parser would make from these flags."""
    params = xlc.CommonParams()
    params.model.path = args.model
    params.hostnames = [args.host]
    params.port = args.port
    if args.parallel < 0:  # llama-server's auto (tools/server/server.cpp)
        params.n_parallel, params.kv_unified = 4, True
    else:
        params.n_parallel = args.parallel
    for flag, field in (("ctx_size", "n_ctx"), ("batch_size", "n_batch"), ("ubatch_size", "n_ubatch"),
                        ("n_gpu_layers", "n_gpu_layers"), ("cache_ram", "cache_ram_mib"),
                        ("ctx_checkpoints", "n_ctx_checkpoints"), ("checkpoint_min_step", "checkpoint_min_step"),
                        ("verbosity", "verbosity"), ("slot_save_path", "slot_save_path")):
        value = getattr(args, flag)
        if value is not None:
            setattr(params, field, value)
    if args.threads is not None:
        params.cpuparams.n_threads = args.threads
    if args.threads_batch is not None:
        params.cpuparams_batch.n_threads = args.threads_batch
    elif args.threads is not None:  # llama.cpp: the batch threads default to the generation threads
        params.cpuparams_batch.n_threads = args.threads
    if args.flash_attn is not None:
        params.flash_attn_type = getattr(xlc.llama_flash_attn_type, FLASH_ATTN[args.flash_attn])
    if args.alias is not None:
        params.model_alias = {args.alias}
    if args.no_webui:
        params.ui = False
    return params


def version() -> str:
    wheel = metadata.version("xllamacpp")
    return f"version: {wheel.rsplit('.', 1)[-1]} (xllamacpp {wheel}, prebuilt wheel)"


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    if args.version:
        print(version(), file=sys.stderr)
        return 0
    if not args.model:
        parser().error("--model is required")
    import xllamacpp as xlc

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    server = xlc.Server(params_from(args, xlc))
    print(f"llama-server (prebuilt): {version()}, listening on {server.listening_address}",
          file=sys.stderr, flush=True)
    stop.wait()
    del server  # llama.cpp's ~Server: stops the HTTP loop and the slots
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
