"""The /generate request we send and the strict parsing of what comes back."""

import copy

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from replay.errors import MalformedResponse, ServerError
from replay.apis.sglang import generate_body, parse_completion


def response(n=3, k=2):
    return {
        "text": "", "output_ids": [5, 6, 7][:n],
        "meta_info": {
            "finish_reason": {"type": "length", "length": n}, "prompt_tokens": 10,
            "cached_tokens": 8, "cached_tokens_details": {"device": 4, "host": 4},
            "output_token_logprobs": [[-0.5, 5, None], [-0.25, 6, None], [-0.125, 7, None]][:n],
            "output_top_logprobs": [[[-0.5, 5, None], [-1.5, 9, None]][:k]] * n,
        },
    }


def parse(obj, n=3, k=2, vocab=100):
    return parse_completion(obj, "g0/b1/t2", max_new_tokens=n, top_k=k, vocab_size=vocab)


def test_body_asks_for_output_logprobs_only_greedy_and_fixed_length():
    body = generate_body(np.array([1, 2, 3], np.int32), 160, 5)
    assert body["logprob_start_len"] == -1
    assert body["sampling_params"] == {"temperature": 0, "ignore_eos": True, "max_new_tokens": 160}
    assert body["return_logprob"] is True and body["top_logprobs_num"] == 5
    assert body["input_ids"] == [1, 2, 3] and all(type(t) is int for t in body["input_ids"])


def test_valid_response_parses_exactly():
    c = parse(response())
    assert c.output_ids.tolist() == [5, 6, 7]
    assert c.logprobs.tolist() == [-0.5, -0.25, -0.125]
    assert c.top_ids.shape == (3, 2) and c.top_ids[0].tolist() == [5, 9]
    assert c.cached_tokens == 8 and c.cached_details == {"device": 4, "host": 4}
    assert c.finish_reason == "length"


def test_missing_field_names_the_request():
    bad = response()
    del bad["meta_info"]["output_token_logprobs"]
    with pytest.raises(MalformedResponse, match="g0/b1/t2.*output_token_logprobs"):
        parse(bad)


def test_lengths_that_disagree_are_refused():
    bad = response()
    bad["meta_info"]["output_token_logprobs"].pop()
    with pytest.raises(MalformedResponse, match="2 entries for 3"):
        parse(bad)


def test_wrong_number_of_tokens_is_refused():
    with pytest.raises(MalformedResponse, match="expected exactly 4"):
        parse(response(), n=4)


def test_an_aborted_answer_is_a_server_error_naming_the_abort():
    obj = response(n=2)
    obj["meta_info"]["finish_reason"] = {"type": "abort", "message": "Aborted", "status_code": None}
    with pytest.raises(ServerError, match="g0/b1/t2: the server aborted it after 2 of 3 tokens: Aborted"):
        parse(obj, n=3)


def test_null_logprob_is_refused():
    bad = response()
    bad["meta_info"]["output_token_logprobs"][1][0] = None
    with pytest.raises(MalformedResponse, match="not a number"):
        parse(bad)


def test_string_logprob_is_refused():
    bad = response()
    bad["meta_info"]["output_token_logprobs"][1][0] = "-0.25"
    with pytest.raises(MalformedResponse, match="not a number"):
        parse(bad)


def test_token_outside_vocabulary_is_refused():
    bad = response()
    bad["output_ids"][0] = 100
    with pytest.raises(MalformedResponse, match="outside the vocabulary"):
        parse(bad)


def test_logprob_entry_naming_another_token_is_refused():
    bad = response()
    bad["meta_info"]["output_token_logprobs"][0][1] = 6
    with pytest.raises(MalformedResponse, match="names token 6"):
        parse(bad)


def test_duplicate_token_in_top_k_is_refused():
    bad = copy.deepcopy(response())
    bad["meta_info"]["output_top_logprobs"][1] = [[-0.5, 5, None], [-0.5, 5, None]]
    with pytest.raises(MalformedResponse, match="twice"):
        parse(bad)


def test_missing_cached_tokens_is_refused():
    bad = response()
    del bad["meta_info"]["cached_tokens"]
    with pytest.raises(MalformedResponse, match="cached_tokens"):
        parse(bad)


def test_non_object_is_refused():
    with pytest.raises(MalformedResponse, match="JSON object"):
        parse([response()])


def test_short_top_k_rows_are_padded_with_absent_entries():
    c = parse(response(k=1), k=2)
    assert c.top_ids[0].tolist() == [5, -1] and np.isnan(c.top_logprobs[0, 1])


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 200) | st.floats(allow_nan=True) | st.text(max_size=3),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
paths = st.lists(st.sampled_from(["output_ids", "meta_info", "output_token_logprobs",
                                  "output_top_logprobs", "cached_tokens", "finish_reason",
                                  "cached_tokens_details", 0, 1, 2]), min_size=1, max_size=4)


def _set_path(obj, path, value):
    """Replace whatever lives at `path` (keys or list indexes, skipping steps that don't fit)."""
    target = obj
    for step in path[:-1]:
        if isinstance(target, dict) and step in target:
            target = target[step]
        elif isinstance(target, list) and isinstance(step, int) and step < len(target):
            target = target[step]
    last = path[-1]
    if isinstance(target, dict) and isinstance(last, str):
        target[last] = value
    elif isinstance(target, list) and isinstance(last, int) and last < len(target):
        target[last] = value


@settings(max_examples=150, deadline=None)
@given(paths, json_values)
def test_any_corruption_parses_or_raises_malformed_response_never_anything_else(path, value):
    obj = copy.deepcopy(response())
    _set_path(obj, path, value)
    try:
        c = parse(obj)
    except MalformedResponse as exc:
        assert "g0/b1/t2" in str(exc)
        return
    assert len(c.output_ids) == 3 and c.logprobs.dtype == np.float64
