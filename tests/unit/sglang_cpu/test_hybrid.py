"""What a hybrid needs of a CPU test server (replay/sglang_cpu/hybrid.py): the one-line refusal
where sgl-kernel lacks the GDN ops, and nothing at all for any other model."""

from __future__ import annotations

import json

from replay.sglang_cpu import hybrid
from replay.sglang_cpu.tiny_model import llama_config, qwen3_next_config


def model_dir(tmp_path, config: dict) -> str:
    (tmp_path / "config.json").write_text(json.dumps(config))
    return str(tmp_path)


def test_a_llama_is_never_refused_whatever_the_kernel_holds(tmp_path):
    assert hybrid.refusal(model_dir(tmp_path, llama_config(0, "bfloat16")), set()) is None


def test_a_hybrid_without_the_gdn_ops_is_refused_in_one_line_with_a_hint(tmp_path):
    line = hybrid.refusal(model_dir(tmp_path, qwen3_next_config(0)), set())
    assert line is not None and "\n" not in line
    assert "AVX-512 BF16" in line and "hint:" in line and "chunk_gated_delta_rule_cpu" in line


def test_a_hybrid_with_every_gdn_op_is_let_through(tmp_path):
    assert hybrid.refusal(model_dir(tmp_path, qwen3_next_config(0)), set(hybrid.GDN_OPS)) is None


def test_a_model_path_that_is_no_local_folder_is_not_taken_for_a_hybrid(tmp_path):
    assert not hybrid.is_hybrid(str(tmp_path / "absent"))
    assert not hybrid.is_hybrid("Qwen/Qwen3-Next-80B-A3B-Instruct")


def test_the_tiny_qwen3_next_is_three_gdn_layers_then_full_attention_with_cpu_head_counts():
    config = qwen3_next_config(0)
    kinds = ["full" if (i + 1) % config["full_attention_interval"] == 0 else "linear"
             for i in range(config["num_hidden_layers"])]
    assert kinds == ["linear", "linear", "linear", "full"]
    assert (config["linear_num_key_heads_cpu"], config["linear_num_value_heads_cpu"]) == \
        (config["linear_num_key_heads"], config["linear_num_value_heads"])
    assert config["shared_expert_intermediate_size"] == 0  # its gate is a Triton kernel off AMX
