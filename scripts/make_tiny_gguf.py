#!/usr/bin/env python3
"""Make tiny random-weight GGUF models locally, with no download at all.

Everything goes into the cache dir
``${GOLDEN_LLAMA_CACHE:-$HOME/.cache/golden-replay/llama.cpp}/models``:

* ``tiny-llama``   LlamaForCausalLM (hidden 64, 2 layers, 4 heads / 2 kv heads),
                   tokenizer: a 768-token byte-fallback BPE trained here with
                   ``tokenizers`` (Llama-2 style ``tokenizer.json``).
* ``tiny-jamba``   JambaForCausalLM hybrid (layer 0 Mamba, layer 1 attention,
                   dense FFN), same tokenizer as tiny-llama.  Exercises
                   ``--ctx-checkpoints`` (hybrid memory cannot be rolled back).
* ``tiny-llama-hd64`` (only when named) tiny-llama with 64-wide heads (hidden 128,
                   2 heads / 1 kv head), same tokenizer.  llama.cpp's CUDA flash
                   attention has no kernel for tiny-llama's 16-wide heads, so this
                   is the model that exercises it (scripts/h200_llamacpp.sh).
* ``tiny-mamba2``  Mamba2ForCausalLM, pure recurrent, 2 layers.  Its converter
                   path only takes a SentencePiece ``tokenizer.model`` (a
                   ``tokenizer.json`` would go the GPT-2 path, which refuses any
                   unknown pre-tokenizer), so it gets a 768-piece BPE trained
                   here with ``sentencepiece``.

Each model is written as an HF folder (``<name>-hf/``: config.json,
model.safetensors, tokenizer files), then converted with llama.cpp's own
``convert_hf_to_gguf.py --outtype f32`` (from the tree that
scripts/build_llama_server.sh unpacked) to ``<name>-f32.gguf``.

Idempotent: a model is rebuilt only when its ``<name>-f32.gguf.recipe.json``
is missing or differs from the current recipe (or with ``--force``).
Prints one line ``<name> <path>`` per model; exit status 1 if any failed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

RECIPE_VERSION = 1
VOCAB_SIZE = 768  # multiple of 16 (Mamba2's converter pads to 16) and of 256
SEED = 1234

CACHE = Path(os.environ.get("GOLDEN_LLAMA_CACHE", Path.home() / ".cache/golden-replay/llama.cpp"))


def log(msg: str) -> None:
    print(f"[make_tiny_gguf] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------- corpus

_ONSETS = ["", "b", "c", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "st", "tr", "ch", "sh", "th", "pl", "gr"]
_VOWELS = ["a", "e", "i", "o", "u", "ai", "ea", "ou", "io"]
_CODAS = ["", "", "n", "r", "s", "t", "l", "m", "nd", "ng", "st", "ck"]
_COMMON = ["the", "of", "and", "to", "in", "is", "that", "it", "for", "on", "with", "as", "was", "at", "by", "cache", "token", "prefix", "model", "server"]
_PUNCT = [".", ",", "!", "?", ";", ":", "-", "(", ")", "\"", "'"]


def make_corpus(n_lines: int = 4000, seed: int = SEED) -> list[str]:
    """Deterministic pseudo-English text: syllable words, numbers, punctuation."""
    rng = random.Random(seed)
    lexicon = sorted({
        "".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_CODAS) for _ in range(rng.randint(1, 3)))
        for _ in range(600)
    })
    lines = []
    for _ in range(n_lines):
        words = []
        for _ in range(rng.randint(4, 14)):
            r = rng.random()
            if r < 0.35:
                w = rng.choice(_COMMON)
            elif r < 0.9:
                w = rng.choice(lexicon)
            elif r < 0.97:
                w = str(rng.randint(0, 9999))
            else:
                w = rng.choice(_PUNCT)
            if rng.random() < 0.08:
                w = w.capitalize()
            words.append(w)
        line = " ".join(words)
        line = line[0].upper() + line[1:] + rng.choice([".", ".", ".", "?", "!"])
        lines.append(line)
    return lines


# ------------------------------------------------------------------ tokenizers

BYTE_TOKENS = [f"<0x{i:02X}>" for i in range(256)]
SPECIALS = ["<unk>", "<s>", "</s>"]


def train_bpe_tokenizer(lines: list[str], out_dir: Path, vocab_size: int = VOCAB_SIZE) -> None:
    """Llama-2-style byte-fallback BPE trained with `tokenizers`.

    Layout like Llama-2: 0 <unk>, 1 <s>, 2 </s>, 3..258 <0x00>..<0xFF>, then
    the learned alphabet and merges.  Normalizer prepends/replaces spaces with
    U+2581, decoder is the Sequence llama.cpp's LlamaHfVocab expects.
    """
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])

    # 1) learn merges on the normalized text (no specials, no byte tokens)
    base = Tokenizer(models.BPE())
    base.normalizer = normalizer
    n_learn = vocab_size - len(SPECIALS) - len(BYTE_TOKENS)
    trainer = trainers.BpeTrainer(vocab_size=n_learn, min_frequency=2, show_progress=False, special_tokens=[])
    base.train_from_iterator(lines, trainer=trainer)
    learned = json.loads(base.to_str())["model"]
    learned_vocab: dict[str, int] = learned["vocab"]
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in learned["merges"]]

    # 2) final vocab in Llama-2 order
    vocab: dict[str, int] = {}
    for t in SPECIALS + BYTE_TOKENS:
        vocab[t] = len(vocab)
    for t, _ in sorted(learned_vocab.items(), key=lambda kv: kv[1]):
        if t not in vocab:
            vocab[t] = len(vocab)
    # pad (should not be needed) so the vocab is exactly vocab_size
    while len(vocab) < vocab_size:
        vocab[f"<extra_{len(vocab)}>"] = len(vocab)
    assert len(vocab) == vocab_size, len(vocab)

    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizer
    tok.decoder = decoders.Sequence([
        decoders.Replace("\u2581", " "),
        decoders.ByteFallback(),
        decoders.Fuse(),
        decoders.Strip(" ", 1, 0),
    ])
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIALS])
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 1)]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
        model_max_length=2048, clean_up_tokenization_spaces=False,
    )
    fast.save_pretrained(out_dir)
    # sanity: round trip
    text = "the prefix cache is warm, 1234 tokens!"
    ids = fast.encode(text)
    assert ids[0] == 1 and fast.decode(ids, skip_special_tokens=True) == text, (ids, fast.decode(ids))


def train_spm_tokenizer(lines: list[str], out_dir: Path, vocab_size: int = VOCAB_SIZE) -> None:
    """SentencePiece BPE with byte fallback, trained here; writes tokenizer.model."""
    import sentencepiece as spm

    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as td:
        corpus = Path(td) / "corpus.txt"
        corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
        prefix = Path(td) / "tok"
        spm.SentencePieceTrainer.train(
            input=str(corpus), model_prefix=str(prefix), vocab_size=vocab_size, model_type="bpe",
            byte_fallback=True, character_coverage=1.0, unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
            num_threads=1, seed_sentencepiece_size=100000, minloglevel=2,
        )
        shutil.copy(f"{prefix}.model", out_dir / "tokenizer.model")
    sp = spm.SentencePieceProcessor(model_file=str(out_dir / "tokenizer.model"))
    assert sp.vocab_size() == vocab_size, sp.vocab_size()
    (out_dir / "tokenizer_config.json").write_text(json.dumps({
        "add_bos_token": True, "add_eos_token": False, "bos_token": "<s>", "eos_token": "</s>",
        "unk_token": "<unk>", "model_max_length": 2048,
    }, indent=2))


# ---------------------------------------------------------------------- models

def recipe(name: str) -> dict:
    """Everything that determines the gguf; a change rebuilds the model."""
    from importlib.metadata import version  # cheap: no torch/transformers import on the fast path

    common = {"recipe_version": RECIPE_VERSION, "seed": SEED, "vocab_size": VOCAB_SIZE, "outtype": "f32",
              "transformers": version("transformers"), "tokenizers": version("tokenizers"),
              "torch": version("torch").split("+")[0], "llama_src": str(_llama_src())}
    if name == "tiny-llama":
        return {**common, "arch": "LlamaForCausalLM", "tokenizer": "tokenizers-bpe", "config": LLAMA_CFG}
    if name == "tiny-llama-hd64":
        return {**common, "arch": "LlamaForCausalLM", "tokenizer": "tokenizers-bpe", "config": LLAMA_HD64_CFG}
    if name == "tiny-jamba":
        return {**common, "arch": "JambaForCausalLM", "tokenizer": "tokenizers-bpe", "config": JAMBA_CFG}
    if name == "tiny-mamba2":
        return {**common, "arch": "Mamba2ForCausalLM", "tokenizer": "sentencepiece-bpe",
                "sentencepiece": version("sentencepiece"), "config": MAMBA2_CFG}
    raise KeyError(name)


LLAMA_CFG = dict(
    hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
    max_position_embeddings=4096, rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False,
    # a wider init than the default 0.02 so logits are spread out (top-n not near-ties)
    initializer_range=0.15, bos_token_id=1, eos_token_id=2, pad_token_id=None,
)
# head_dim 64: a size llama.cpp's CUDA flash-attention kernels support (16 is not)
LLAMA_HD64_CFG = {**LLAMA_CFG, "hidden_size": 128, "intermediate_size": 256, "num_attention_heads": 2,
                  "num_key_value_heads": 1}
JAMBA_CFG = dict(
    hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
    max_position_embeddings=4096, rms_norm_eps=1e-6, tie_word_embeddings=False, initializer_range=0.15,
    # layer 0: Mamba, layer 1: attention; one expert = dense FFN everywhere
    attn_layer_period=2, attn_layer_offset=1, num_experts=1, num_experts_per_tok=1,
    expert_layer_period=2, expert_layer_offset=1,
    mamba_d_state=16, mamba_d_conv=4, mamba_expand=2, mamba_dt_rank=4, use_mamba_kernels=False,
    pad_token_id=0, bos_token_id=1, eos_token_id=2,
)
MAMBA2_CFG = dict(
    hidden_size=64, num_hidden_layers=2, expand=2, head_dim=16, num_heads=8, n_groups=1, state_size=16,
    conv_kernel=4, chunk_size=64, layer_norm_epsilon=1e-5, tie_word_embeddings=False, initializer_range=0.15,
    pad_token_id=0, bos_token_id=1, eos_token_id=2, use_bias=False, use_conv_bias=True, rms_norm=True,
)


def _llama_src() -> Path:
    return (CACHE / "llama.cpp").resolve()


def _converter() -> Path:
    conv = _llama_src() / "convert_hf_to_gguf.py"
    if not conv.is_file():
        raise SystemExit(f"{conv} not found: run scripts/build_llama_server.sh first (it unpacks llama.cpp into {CACHE})")
    return conv


def build_hf_model(name: str, hf_dir: Path, lines: list[str]) -> None:
    import torch
    import transformers

    torch.set_num_threads(1)
    if hf_dir.exists():
        shutil.rmtree(hf_dir)
    hf_dir.mkdir(parents=True)

    if name in ("tiny-llama", "tiny-llama-hd64", "tiny-jamba"):
        train_bpe_tokenizer(lines, hf_dir)
    else:
        train_spm_tokenizer(lines, hf_dir)

    torch.manual_seed(SEED)
    if name == "tiny-llama":
        cfg = transformers.LlamaConfig(vocab_size=VOCAB_SIZE, **LLAMA_CFG)
        model = transformers.LlamaForCausalLM(cfg)
    elif name == "tiny-llama-hd64":
        cfg = transformers.LlamaConfig(vocab_size=VOCAB_SIZE, **LLAMA_HD64_CFG)
        model = transformers.LlamaForCausalLM(cfg)
    elif name == "tiny-jamba":
        cfg = transformers.JambaConfig(vocab_size=VOCAB_SIZE, **JAMBA_CFG)
        model = transformers.JambaForCausalLM(cfg)
    elif name == "tiny-mamba2":
        cfg = transformers.Mamba2Config(vocab_size=VOCAB_SIZE, **MAMBA2_CFG)
        model = transformers.Mamba2ForCausalLM(cfg)
    else:
        raise KeyError(name)
    model = model.to(torch.float32).eval()
    # one HF forward as a smoke test of the architecture (not used for anything else)
    with torch.no_grad():
        out = model(torch.tensor([[1, 300, 301, 302]]))
    assert torch.isfinite(out.logits).all()
    model.save_pretrained(hf_dir, safe_serialization=True)


def convert(hf_dir: Path, gguf_path: Path) -> None:
    env = dict(os.environ)
    env.pop("NO_LOCAL_GGUF", None)  # use the gguf-py of the same llama.cpp tree
    env["HF_HUB_OFFLINE"] = "1"
    env["TRANSFORMERS_OFFLINE"] = "1"
    tmp = gguf_path.with_suffix(".gguf.tmp")
    cmd = [sys.executable, str(_converter()), str(hf_dir), "--outfile", str(tmp), "--outtype", "f32"]
    log("running " + " ".join(cmd))
    res = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if res.returncode != 0:
        sys.stderr.write(res.stdout[-4000:] + res.stderr[-8000:])
        raise RuntimeError(f"convert_hf_to_gguf.py failed for {hf_dir} (rc {res.returncode})")
    os.replace(tmp, gguf_path)


def make_model(name: str, force: bool, lines: list[str]) -> Path:
    out_dir = CACHE / "models"
    out_dir.mkdir(parents=True, exist_ok=True)
    gguf_path = out_dir / f"{name}-f32.gguf"
    recipe_path = gguf_path.with_name(gguf_path.name + ".recipe.json")
    want = recipe(name)
    if not force and gguf_path.is_file() and recipe_path.is_file():
        try:
            if json.loads(recipe_path.read_text()) == want:
                return gguf_path
        except json.JSONDecodeError:
            pass
    _converter()  # fail early (before the slow HF part) when llama.cpp is not unpacked yet
    hf_dir = out_dir / f"{name}-hf"
    log(f"building {name} in {hf_dir}")
    build_hf_model(name, hf_dir, lines)
    convert(hf_dir, gguf_path)
    recipe_path.write_text(json.dumps(want, indent=2, sort_keys=True))
    sha = hashlib.sha256(gguf_path.read_bytes()).hexdigest()
    gguf_path.with_name(gguf_path.name + ".sha256").write_text(sha + "\n")
    return gguf_path


MODELS = ["tiny-llama", "tiny-jamba", "tiny-mamba2"]
OPTIONAL_MODELS = ["tiny-llama-hd64"]  # built only when named


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="*", default=MODELS, help=f"subset of {MODELS + OPTIONAL_MODELS} (default: {MODELS})")
    ap.add_argument("--force", action="store_true", help="rebuild even when the recipe is unchanged")
    args = ap.parse_args(argv)

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

    lines = make_corpus()
    failed = 0
    for name in args.models:
        if name not in MODELS + OPTIONAL_MODELS:
            ap.error(f"unknown model {name!r}; choose from {MODELS + OPTIONAL_MODELS}")
        try:
            path = make_model(name, args.force, lines)
        except Exception as e:  # keep going: report every model
            log(f"FAILED {name}: {type(e).__name__}: {e}")
            failed += 1
            continue
        print(f"{name} {path}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
