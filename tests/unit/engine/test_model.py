"""The embedded hybrid model: its contract is bit-identical results whatever the batch, the
chunking, the cache state and the thread count (the CPU capability, in a fresh interpreter each:
tests/integration/test_engine_process.py)."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
import torch

from replay.engine.config import CONFIGS, ModelConfig, get_config
from replay.engine.model import ForwardItem, ForwardResult, HybridModel, SSMState, greedy, top_k
from replay.engine.weights import make_weights


@pytest.fixture(scope="module")
def model() -> HybridModel:
    return HybridModel(get_config("tiny"), seed=0)


def tokens(seed: int, n: int, vocab: int = 4096) -> torch.Tensor:
    return torch.from_numpy(np.random.Generator(np.random.PCG64(seed)).integers(0, vocab, n))


def empty_kv(model: HybridModel) -> list[tuple[torch.Tensor, torch.Tensor]]:
    c = model.config
    shape = (0, c.n_kv_heads, c.head_dim)
    return [(torch.zeros(shape), torch.zeros(shape)) for _ in range(c.attn_layers)]


def cold(model: HybridModel, toks: torch.Tensor) -> ForwardItem:
    return ForwardItem(tokens=toks, start=0, past_kv=empty_kv(model), ssm=model.empty_ssm())


def extend_kv(
    past: list[tuple[torch.Tensor, torch.Tensor]], new: list[tuple[torch.Tensor, torch.Tensor]]
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(torch.cat([pk, nk]), torch.cat([pv, nv])) for (pk, pv), (nk, nv) in zip(past, new)]


def run_in_chunks(model: HybridModel, toks: torch.Tensor, sizes: list[int]) -> tuple[list[ForwardResult], ForwardItem]:
    """Feed `toks` in successive calls of the given sizes; returns the results and the item state
    after the last call (its past K/V and SSM states, as a prefix cache would hold them)."""
    kv, ssm, start, results = empty_kv(model), model.empty_ssm(), 0, []
    for size in sizes:
        [result] = model.forward([ForwardItem(toks[start : start + size], start, kv, ssm)])
        kv, ssm, start = extend_kv(kv, result.new_kv), result.ssm, start + size
        results.append(result)
    return results, ForwardItem(torch.zeros(0, dtype=torch.int64), start, kv, ssm)


def chunks_of(total: int, size: int) -> list[int]:
    return [min(size, total - s) for s in range(0, total, size)]


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and bool(torch.equal(a.contiguous().view(torch.int32), b.contiguous().view(torch.int32)))


def assert_same_result(a: ForwardResult, b: ForwardResult, *, compare_kv: bool = True) -> None:
    assert same_bits(a.logprobs, b.logprobs)
    for sa, sb in zip(a.ssm, b.ssm, strict=True):
        assert same_bits(sa.conv, sb.conv) and same_bits(sa.h, sb.h)
    if compare_kv:
        for (ka, va), (kb, vb) in zip(a.new_kv, b.new_kv, strict=True):
            assert same_bits(ka, kb) and same_bits(va, vb)


# ---------------------------------------------------------------- config and weights


def test_get_config_names_known_configs_on_error() -> None:
    with pytest.raises(ValueError, match="tiny"):
        get_config("huge")
    assert get_config("tiny") is CONFIGS["tiny"]


def test_tiny_config_shape() -> None:
    c = get_config("tiny")
    assert (c.vocab_size, c.d_model, c.layers, c.max_context) == (4096, 128, ("ssm", "attn", "ssm", "attn"), 4096)
    assert (c.attn_layers, c.ssm_layers) == (2, 2)
    assert c.n_kv_heads < c.n_heads


def test_config_rejects_inconsistent_shapes() -> None:
    base = get_config("tiny").__dict__ | {"name": "bad"}
    with pytest.raises(ValueError, match="n_kv_heads"):
        ModelConfig(**(base | {"n_kv_heads": 3}))
    with pytest.raises(ValueError, match="layers"):
        ModelConfig(**(base | {"layers": ("attn", "mlp")}))


def weights_digest(config: ModelConfig, seed: int) -> str:
    digest = hashlib.sha256()
    for name, tensor in sorted(make_weights(config, seed).tensors().items()):
        digest.update(name.encode())
        digest.update(tensor.numpy().tobytes())
    return digest.hexdigest()


def test_weights_identical_across_two_constructions() -> None:
    assert weights_digest(get_config("tiny"), 0) == weights_digest(get_config("tiny"), 0)


def test_weights_depend_on_the_seed() -> None:
    assert weights_digest(get_config("tiny"), 0) != weights_digest(get_config("tiny"), 1)


def test_model_path_names_config_and_seed() -> None:
    assert HybridModel(get_config("tiny"), seed=7).model_path == "embedded/hybrid-tiny@seed7"


def test_empty_ssm_is_zero_state_per_ssm_layer(model: HybridModel) -> None:
    c = model.config
    states = model.empty_ssm()
    assert len(states) == c.ssm_layers
    for s in states:
        assert s.conv.shape == (c.conv_width - 1, c.d_inner) and s.h.shape == (c.d_inner, c.d_state)
        assert not s.conv.any() and not s.h.any()


# ---------------------------------------------------------------- forward basics


def test_forward_returns_normalised_logprobs_and_shapes(model: HybridModel) -> None:
    c = model.config
    [result] = model.forward([cold(model, tokens(1, 12))])
    assert result.logprobs.shape == (c.vocab_size,) and result.logprobs.dtype == torch.float32
    assert abs(torch.logsumexp(result.logprobs.double(), 0).item()) < 1e-5
    assert len(result.new_kv) == c.attn_layers and len(result.ssm) == c.ssm_layers
    assert all(k.shape == (12, c.n_kv_heads, c.head_dim) == v.shape for k, v in result.new_kv)


def test_forward_of_no_items_returns_nothing(model: HybridModel) -> None:
    assert model.forward([]) == []


def test_forward_does_not_mutate_its_inputs(model: HybridModel) -> None:
    [prefix] = model.forward([cold(model, tokens(2, 9))])
    item = ForwardItem(tokens(3, 5), 9, [(k.clone(), v.clone()) for k, v in prefix.new_kv], [s.clone() for s in prefix.ssm])
    before = [s.clone() for s in item.ssm], [(k.clone(), v.clone()) for k, v in item.past_kv], item.tokens.clone()
    model.forward([item])
    assert all(same_bits(a.h, b.h) and same_bits(a.conv, b.conv) for a, b in zip(before[0], item.ssm))
    assert all(same_bits(a[0], b[0]) and same_bits(a[1], b[1]) for a, b in zip(before[1], item.past_kv))
    assert torch.equal(before[2], item.tokens)


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda m, it: ForwardItem(it.tokens.int(), it.start, it.past_kv, it.ssm), "int64"),
        (lambda m, it: ForwardItem(it.tokens[:0], it.start, it.past_kv, it.ssm), "non-empty"),
        (lambda m, it: ForwardItem(it.tokens + 5000, it.start, it.past_kv, it.ssm), "token ids"),
        (lambda m, it: ForwardItem(it.tokens, 4095, it.past_kv, it.ssm), "max_context"),
        (lambda m, it: ForwardItem(it.tokens, 3, it.past_kv, it.ssm), "past K/V"),
        (lambda m, it: ForwardItem(it.tokens, it.start, it.past_kv[:1], it.ssm), "past_kv pairs"),
    ],
)
def test_forward_rejects_malformed_items(model: HybridModel, change, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        model.forward([change(model, cold(model, tokens(4, 3)))])


# ---------------------------------------------------------------- the contract


def test_batch_of_one_equals_batch_of_eight(model: HybridModel) -> None:
    """Eight items of different lengths and cached prefixes (a decode group with different key
    counts, prefill chunks of different sizes) give each item the bits it gets alone."""
    items = []
    for i, (prefix_len, new_len) in enumerate([(0, 1), (0, 23), (5, 1), (40, 1), (17, 8), (0, 64), (33, 1), (9, 8)]):
        seq = tokens(10 + i, prefix_len + new_len)
        if prefix_len:
            [prefix] = model.forward([cold(model, seq[:prefix_len])])
            items.append(ForwardItem(seq[prefix_len:], prefix_len, prefix.new_kv, prefix.ssm))
        else:
            items.append(cold(model, seq))
    together = model.forward(items)
    for item, result in zip(items, together):
        [alone] = model.forward([item])
        assert_same_result(alone, result)


def test_item_order_within_a_batch_does_not_matter(model: HybridModel) -> None:
    items = [cold(model, tokens(20 + i, n)) for i, n in enumerate((3, 11, 3, 7))]
    forward_order = model.forward(items)
    reverse_order = model.forward(items[::-1])[::-1]
    for a, b in zip(forward_order, reverse_order):
        assert_same_result(a, b)


@pytest.mark.parametrize("chunk, length", [(1, 24), (7, 70), (64, 70)])
def test_chunked_prefill_equals_whole_prefill(model: HybridModel, chunk: int, length: int) -> None:
    seq = tokens(30, length)
    [whole] = model.forward([cold(model, seq)])
    results, state = run_in_chunks(model, seq, chunks_of(length, chunk))
    assert same_bits(results[-1].logprobs, whole.logprobs)
    for (k_all, v_all), (k_whole, v_whole) in zip(state.past_kv, whole.new_kv):
        assert same_bits(k_all, k_whole) and same_bits(v_all, v_whole)
    for s_chunked, s_whole in zip(state.ssm, whole.ssm):
        assert same_bits(s_chunked.conv, s_whole.conv) and same_bits(s_chunked.h, s_whole.h)


def test_every_position_logprob_is_chunking_invariant(model: HybridModel) -> None:
    """Token-by-token (decode-like) logprobs equal those of prefill chunks ending at each token."""
    seq = tokens(31, 20)
    one_by_one, _ = run_in_chunks(model, seq, [1] * 20)
    for end in (1, 6, 13, 20):
        [prefill] = model.forward([cold(model, seq[:end])])
        assert same_bits(prefill.logprobs, one_by_one[end - 1].logprobs)


def test_resumed_from_cached_state_equals_cold(model: HybridModel) -> None:
    """A cache hit: the prefix's stored K/V and SSM state (here round-tripped through numpy, as a
    host tier would) resume the sequence with the cold run's bits, also when batched with others."""
    seq = tokens(32, 50)
    [cold_result] = model.forward([cold(model, seq)])
    [prefix] = model.forward([cold(model, seq[:29])])
    stored_kv = [(torch.from_numpy(k.numpy().copy()), torch.from_numpy(v.numpy().copy())) for k, v in prefix.new_kv]
    stored_ssm = [SSMState(torch.from_numpy(s.conv.numpy().copy()), torch.from_numpy(s.h.numpy().copy())) for s in prefix.ssm]
    resumed_item = ForwardItem(seq[29:], 29, stored_kv, stored_ssm)
    [resumed] = model.forward([resumed_item])
    assert same_bits(resumed.logprobs, cold_result.logprobs)
    for s_resumed, s_cold in zip(resumed.ssm, cold_result.ssm):
        assert same_bits(s_resumed.h, s_cold.h) and same_bits(s_resumed.conv, s_cold.conv)
    [_, batched] = model.forward([cold(model, tokens(33, 40)), resumed_item])
    assert same_bits(batched.logprobs, cold_result.logprobs)


def test_thread_count_does_not_change_bits(model: HybridModel) -> None:
    items = [cold(model, tokens(34, 300)), cold(model, tokens(35, 3))]
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        single = model.forward(items)
        torch.set_num_threads(2)
        double = model.forward(items)
    finally:
        torch.set_num_threads(threads)
    for a, b in zip(single, double):
        assert_same_result(a, b)


@pytest.mark.parametrize("chunk_elems", [1 << 27, 1 << 12])
def test_product_chunk_size_does_not_change_bits(chunk_elems: int) -> None:
    """CUDA uses 512 Mi-element product chunks, CPU 0.5 Mi: the bits must not notice."""
    default = HybridModel(get_config("tiny"), seed=0)
    resized = HybridModel(get_config("tiny"), seed=0)
    resized._chunk_elems = chunk_elems
    items = [cold(default, tokens(37, 45)), cold(default, tokens(38, 1))]
    for a, b in zip(default.forward(items), resized.forward(items)):
        assert_same_result(a, b)


# ---------------------------------------------------------------- sampling helpers


def test_greedy_takes_the_lowest_id_among_ties() -> None:
    logprobs = torch.tensor([-3.0, -1.0, -2.0, -1.0, -1.0])
    assert greedy(logprobs) == 1


def test_top_k_orders_ties_by_lower_id_and_returns_exact_floats() -> None:
    logprobs = torch.tensor([-2.0, -0.5, -2.0, -0.5, -3.0, -2.0], dtype=torch.float32)
    ids, values = top_k(logprobs, 4)
    assert ids == [1, 3, 0, 2]
    assert values == [-0.5, -0.5, -2.0, -2.0] and all(type(v) is float for v in values)
    third = torch.tensor([0.1], dtype=torch.float32)
    assert top_k(third, 1)[1] == [float(np.float32(0.1))]  # the float32 value, widened exactly


def test_top_k_clamps_k_to_the_vocabulary() -> None:
    assert top_k(torch.tensor([0.0, -1.0]), 5)[0] == [0, 1]
    assert top_k(torch.tensor([0.0, -1.0]), 0) == ([], [])


# ---------------------------------------------------------------- pinned bits

# Committed goldens recorded on the embedded engine hold these exact bits. Change the pins only
# together with the goldens (a model change invalidates every golden recorded against it).
PINNED_WEIGHTS_SHA256 = "a2fea3c2f97553557e68def169a3fb674f49289b317ee526cc177035c4d56de3"
PINNED_LOGPROBS_SHA256 = "b91638a62f3d3d77a18b80849e33dbf07a33a2273d5395265d8c7116645514eb"


def test_tiny_seed0_weights_have_the_pinned_bits() -> None:
    assert weights_digest(get_config("tiny"), 0) == PINNED_WEIGHTS_SHA256


def test_tiny_seed0_logprobs_have_the_pinned_bits(model: HybridModel) -> None:
    [result] = model.forward([cold(model, tokens(36, 40))])
    assert hashlib.sha256(result.logprobs.numpy().tobytes()).hexdigest() == PINNED_LOGPROBS_SHA256
