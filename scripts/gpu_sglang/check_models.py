#!/usr/bin/env python3
"""Offline check that SGLang 0.5.17 takes the tiny model folders (make_tiny_hf_models.py's
``-sglang`` models), on a CPU machine, with the carry and the image stand-ins (check_imports.py).

For each folder, as ``sglang.launch_server --model-path FOLDER`` would: the server arguments
(``prepare_server_args``), SGLang's ``ModelConfig`` (its config parser: layer kinds, heads, dtype,
context length), the model class SGLang picks, and the tokenizer SGLang loads (its vocabulary
against the model's, a round trip of a few ids). Not checked here: building the model and loading
its weights (SGLang builds its layers on the GPU; the first server start on the H200 does it).

Prints one ``check_models: ok ...`` or ``check_models: FAILED ...`` line last.
usage: check_models.py SITE FOLDER...   (the stand-in venv's Python)
"""

from __future__ import annotations

import argparse
import sys
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent


def server_args(folder: Path):  # noqa: ANN201 - SGLang's ServerArgs
    from sglang.srt.server_args import prepare_server_args

    return prepare_server_args(["--model-path", str(folder), "--attention-backend", "triton",
                                "--page-size", "128", "--enable-deterministic-inference",
                                "--max-total-tokens", "4096", "--skip-server-warmup"])


def describe(folder: Path) -> str:
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.model_loader.utils import get_model_architecture
    from sglang.srt.utils.hf_transformers_utils import get_tokenizer

    args = server_args(folder)
    config = ModelConfig.from_server_args(args)
    cls, arch = get_model_architecture(config)
    tok = get_tokenizer(str(folder))
    ids = [5, 6, 4095]
    text = tok.decode(ids)
    back = tok.encode(text, add_special_tokens=False)
    hf = config.hf_config
    linear = getattr(hf, "linear_layer_ids", None) or getattr(hf, "layers_block_type", None)
    line = (f"{folder.name}: {arch} -> {cls.__module__}.{cls.__name__}; layers "
            f"{config.num_hidden_layers}, heads {config.num_attention_heads}/"
            f"{config.get_total_num_kv_heads()} kv, head_dim {config.head_dim}, vocab "
            f"{config.vocab_size}, dtype {config.dtype}, context {config.context_len}"
            + (f", layer kinds {linear}" if linear else "")
            + f"; tokenizer {type(tok).__name__} of {len(tok)} ids, {ids} -> {text!r} -> {back}")
    problems = []
    if len(tok) != config.vocab_size:
        problems.append(f"tokenizer has {len(tok)} ids, the model {config.vocab_size}")
    if back != ids:
        problems.append(f"tokenizer round trip {ids} -> {back}")
    return line + ("" if not problems else "  PROBLEM: " + "; ".join(problems))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("site", type=Path)
    p.add_argument("folders", type=Path, nargs="+")
    args = p.parse_args(argv)
    sys.path.insert(0, str(args.site))
    sys.path.insert(0, str(HERE))
    import check_imports

    check_imports.fake_h200(args.site)
    failures = []
    for folder in args.folders:
        try:
            line = describe(folder.resolve())
            print(line)
            if "PROBLEM" in line:
                failures.append(folder.name)
        except Exception as exc:  # noqa: BLE001 - report and go on to the next folder
            traceback.print_exc()
            print(f"{folder.name}: {type(exc).__name__}: {exc}")
            failures.append(folder.name)
    if failures:
        print("check_models: FAILED:", ", ".join(failures))
        return 1
    print(f"check_models: ok ({len(args.folders)} models)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
