"""`python -m replay.engine --profile P [--host H] [--port N] [--fault F] [--device D] [--model M]
[--seed S] [--storage-dir DIR] [--max-total-tokens N] [--page-size N] [--mamba-track-interval N]
[--retract-interval N] [--jitter-seed S]`: serve the embedded engine until SIGINT or SIGTERM."""

from __future__ import annotations

import argparse
import sys

import torch

from replay.engine.faults import FAULTS
from replay.engine.options import PROFILES, add_override_flags, overrides_given, profile_options
from replay.engine.server import serve


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m replay.engine", description=__doc__)
    parser.add_argument("--profile", default="reference", choices=sorted(PROFILES))
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=30000, help="0: any free port")
    parser.add_argument("--fault", choices=sorted(FAULTS), help="inject one cache bug")
    parser.add_argument("--device", help="torch device for the model and KV pool (default cpu)")
    parser.add_argument("--model", help="model config name (default tiny)")
    parser.add_argument("--seed", type=int, help="weight seed (default 0)")
    parser.add_argument("--storage-dir",
                        help="the storage tier's directory (profiles with one); engines given the "
                             "same directory share it, as workers behind a router do (default: "
                             "a private temp dir)")
    add_override_flags(parser)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch CPU threads (default 1: the model's many small ops run "
                             "fastest on one thread; the bits never depend on it)")
    args = parser.parse_args(argv)
    if args.threads < 1:
        parser.error("--threads must be >= 1")
    torch.set_num_threads(args.threads)
    try:
        options = profile_options(args.profile, host=args.host, port=args.port, fault=args.fault,
                                  device=args.device, model=args.model, seed=args.seed,
                                  hicache_storage_dir=args.storage_dir,
                                  **overrides_given(args))
        serve(options, launch_command=" ".join(["python -m replay.engine", *sys.argv[1:]]))
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
