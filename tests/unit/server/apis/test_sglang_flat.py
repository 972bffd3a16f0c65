"""SGLang's flat top-k form (`return_flat_raw_output_top_logprobs`, base64 or JSON lists): read
exactly, the same bits as the nested form, validated as strictly."""

import base64
import copy
import json

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from replay.server.apis.sglang import parse_completion, parse_text
from replay.utils.errors import MalformedResponse
from tests.unit.server.apis.test_sglang import _outcome, _set_path

TOP = [[[-0.5, 5, None], [-1.5, 9, None]], [[-0.25, 6, None], [-2.0, 1, None]],
       [[-0.125, 7, None], [-3.0, 2, None]]]


def nested(top=TOP):
    return {
        "text": "", "output_ids": [5, 6, 7],
        "meta_info": {
            "finish_reason": {"type": "length", "length": 3}, "prompt_tokens": 10,
            "cached_tokens": 0, "cached_tokens_details": None,
            "output_token_logprobs": [[-0.5, 5, None], [-0.25, 6, None], [-0.125, 7, None]],
            "output_top_logprobs": copy.deepcopy(top),
        },
    }


def flat(top=TOP, *, b64=True, null_prefix=0):
    """The same answer as SGLang 0.5.23 builds it with the flat flags (tokenizer_manager's
    _build_flat_top_logprobs_fields): rows after the null prefix, float32/int32."""
    obj = nested(top)
    meta = obj["meta_info"]
    del meta["output_top_logprobs"]
    rows = top[null_prefix:]
    vals = np.array([[e[0] for e in row] for row in rows], dtype=np.float32).reshape(len(rows), -1)
    idx = np.array([[e[1] for e in row] for row in rows], dtype=np.int32).reshape(len(rows), -1)
    if b64:
        meta["output_top_logprobs_val_flat_b64"] = base64.b64encode(vals.tobytes()).decode()
        meta["output_top_logprobs_idx_flat_b64"] = base64.b64encode(idx.tobytes()).decode()
        meta["output_top_logprobs_val_flat_b64_dtype"] = "float32"
        meta["output_top_logprobs_idx_flat_b64_dtype"] = "int32"
    else:
        meta["output_top_logprobs_val_flat"] = [v for row in rows for v in (e[0] for e in row)]
        meta["output_top_logprobs_idx_flat"] = [i for row in rows for i in (e[1] for e in row)]
    meta["output_top_logprobs_shape"] = [vals.shape[0], vals.shape[1]]
    meta["output_top_logprobs_null_prefix"] = null_prefix
    return obj


def parse(obj, n=3, k=2, vocab=100):
    return parse_completion(obj, "g0/b1/t2", max_new_tokens=n, top_k=k, vocab_size=vocab)


@pytest.mark.parametrize("b64", [True, False])
def test_flat_form_parses_to_the_same_arrays_as_nested(b64):
    a, b = parse(nested()), parse(flat(b64=b64))
    assert np.array_equal(a.top_ids, b.top_ids)
    assert np.array_equal(a.top_logprobs.view(np.uint64), b.top_logprobs.view(np.uint64))


def test_null_prefix_rows_are_absent_entries():
    c = parse(flat(null_prefix=1))
    assert c.top_ids[0].tolist() == [-1, -1] and np.isnan(c.top_logprobs[0]).all()
    assert c.top_ids[1].tolist() == [6, 1]


def test_fewer_columns_than_asked_are_padded_like_short_nested_rows():
    one = [[row[0]] for row in TOP]
    c = parse(flat(one), k=2)
    assert c.top_ids[:, 1].tolist() == [-1, -1, -1] and np.isnan(c.top_logprobs[:, 1]).all()


def test_more_columns_than_asked_are_refused():
    with pytest.raises(MalformedResponse, match="2 entries per row, asked for 1"):
        parse(flat(), k=1)


def test_shape_that_does_not_cover_the_outputs_is_refused():
    bad = flat()
    bad["meta_info"]["output_top_logprobs_shape"] = [2, 2]
    with pytest.raises(MalformedResponse, match="cover 0 \\+ 2 positions for 3"):
        parse(bad)


def test_byte_count_that_disagrees_with_the_shape_is_refused():
    bad = flat()
    meta = bad["meta_info"]
    meta["output_top_logprobs_val_flat_b64"] = base64.b64encode(b"\0" * 20).decode()
    with pytest.raises(MalformedResponse, match="holds 5 values for shape \\[3, 2\\]"):
        parse(bad)


def test_unknown_dtype_marker_is_refused():
    bad = flat()
    bad["meta_info"]["output_top_logprobs_val_flat_b64_dtype"] = "bfloat16"
    with pytest.raises(MalformedResponse, match="bfloat16"):
        parse(bad)


def test_text_that_is_not_base64_is_refused():
    bad = flat()
    bad["meta_info"]["output_top_logprobs_idx_flat_b64"] = "not base64!"
    with pytest.raises(MalformedResponse, match="not base64"):
        parse(bad)


def test_flat_token_outside_the_vocabulary_is_refused():
    top = copy.deepcopy(TOP)
    top[2][1][1] = 100
    with pytest.raises(MalformedResponse, match="outside the vocabulary"):
        parse(flat(top))


def test_flat_row_naming_a_token_twice_is_refused():
    top = copy.deepcopy(TOP)
    top[1][1][1] = 6
    with pytest.raises(MalformedResponse, match="output_top_logprobs\\[1\\] lists token 6 twice"):
        parse(flat(top))


def test_flat_json_list_with_a_string_is_refused():
    bad = flat(b64=False)
    bad["meta_info"]["output_top_logprobs_val_flat"][3] = "-1.0"
    with pytest.raises(MalformedResponse, match="not a number"):
        parse(bad)


float32_bits = st.integers(0, 2**32 - 1).map(
    lambda b: float(np.array(b, np.uint32).view(np.float32)))


@settings(max_examples=100, deadline=None)
@given(st.lists(float32_bits.filter(lambda v: v == v), min_size=6, max_size=6))
def test_any_float32_bits_are_identical_in_both_forms(values):
    """Subnormals, -0.0, infinities: the flat bytes widen to exactly the JSON form's float64.
    (NaN cannot travel in JSON, so it is left out.)"""
    top = [[[values[2 * i], 10 + i, None], [values[2 * i + 1], 20 + i, None]] for i in range(3)]
    a, b = parse(nested(top)), parse(flat(top))
    assert np.array_equal(a.top_logprobs.view(np.uint64), b.top_logprobs.view(np.uint64))


flat_paths = st.lists(st.sampled_from([
    "meta_info", "output_top_logprobs_val_flat_b64", "output_top_logprobs_idx_flat_b64",
    "output_top_logprobs_val_flat_b64_dtype", "output_top_logprobs_shape",
    "output_top_logprobs_null_prefix", "output_top_logprobs_val_flat", 0, 1]), min_size=1, max_size=3)
flat_values = st.none() | st.booleans() | st.integers(-2, 8) | st.text(max_size=6) | st.lists(
    st.integers(-1, 120), max_size=7) | st.lists(st.floats(allow_nan=False), max_size=7)


@settings(max_examples=200, deadline=None)
@given(flat_paths, flat_values, st.booleans())
def test_reading_flat_text_typed_agrees_with_the_untyped_parser(path, value, b64):
    obj = flat(b64=b64)
    _set_path(obj, path, value)
    text = json.dumps(obj)
    from_text = _outcome(lambda: parse_text(text, "g0/b1/t2", max_new_tokens=3, top_k=2,
                                            vocab_size=100))
    assert from_text == _outcome(lambda: parse(json.loads(text)))
