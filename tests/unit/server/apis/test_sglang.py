"""The /generate request we send and the strict parsing of what comes back."""

import copy
import json

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from replay.utils.errors import MalformedResponse
from replay.server.apis.sglang import generate_body, parse_completion, parse_text
from tests.unit.server.apis.conformance import AdapterConformance, Capture


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


def test_body_asks_for_flat_base64_top_k_when_top_k_is_positive():
    body = generate_body(np.array([1, 2, 3], np.int32), 160, 5)
    assert body["return_flat_raw_output_top_logprobs"] is True
    assert body["return_flat_raw_top_logprobs_b64"] is True


def test_body_without_top_k_asks_for_no_flat_top_k():
    body = generate_body(np.array([1, 2, 3], np.int32), 160, 0)
    assert "return_flat_raw_output_top_logprobs" not in body
    assert "return_flat_raw_top_logprobs_b64" not in body


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


def test_more_tokens_than_asked_is_refused():
    with pytest.raises(MalformedResponse, match="expected exactly 2"):
        parse(response(), n=2)


def test_short_ignore_eos_answer_says_the_server_capped_max_new_tokens_with_the_numbers():
    with pytest.raises(MalformedResponse) as err:
        parse(response(), n=4)
    message = str(err.value)
    assert "g0/b1/t2" in message and "capped max_new_tokens" in message
    assert "3 output tokens" in message and "max_new_tokens 4" in message
    assert "prompt_tokens 10" in message


def test_abort_without_status_is_an_error_naming_the_servers_message():
    bad = response(n=1)
    bad["meta_info"]["finish_reason"] = {"type": "abort", "message": "KV cache pool is full",
                                         "status_code": None, "err_type": None}
    with pytest.raises(MalformedResponse, match="g0/b1/t2: the server aborted the request: "
                                                "KV cache pool is full"):
        parse(bad)


def test_num_retractions_is_read():
    ok = response()
    ok["meta_info"]["num_retractions"] = 2
    assert parse(ok).num_retractions == 2


def test_missing_num_retractions_reads_as_zero():
    assert parse(response()).num_retractions == 0


def test_negative_num_retractions_is_refused():
    bad = response()
    bad["meta_info"]["num_retractions"] = -1
    with pytest.raises(MalformedResponse, match="num_retractions"):
        parse(bad)


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


def _outcome(fn):
    try:
        c = fn()
    except MalformedResponse as exc:
        return ("error", str(exc))
    return ("ok", c.output_ids.tolist(), c.logprobs.view(np.uint64).tolist(),
            None if c.top_ids is None else c.top_ids.tolist(),
            None if c.top_logprobs is None else c.top_logprobs.view(np.uint64).tolist(),
            c.cached_tokens, c.cached_details, c.finish_reason, c.prompt_tokens, c.num_retractions)


@settings(max_examples=200, deadline=None)
@given(paths, json_values)
def test_reading_the_text_typed_agrees_with_the_untyped_parser_on_any_corruption(path, value):
    """parse_text (typed msgspec fast path) and parse_completion give the same Completion, or the
    same one-line error, for every corruption of a valid answer."""
    obj = copy.deepcopy(response())
    _set_path(obj, path, value)
    text = json.dumps(obj)
    from_text = _outcome(lambda: parse_text(text, "g0/b1/t2", max_new_tokens=3, top_k=2,
                                            vocab_size=100))
    from_obj = _outcome(lambda: parse(json.loads(text)))
    assert from_text == from_obj


def test_extras_ask_for_prompt_logprobs_and_a_cache_key():
    from replay.server.apis.base import RequestExtras
    from replay.server.apis.sglang import SGLangApi
    _, body = SGLangApi().extras_request(np.arange(5), 3, 0, RequestExtras(2, "salt-x"))
    assert body["logprob_start_len"] == 2 and body["extra_key"] == "salt-x"
    assert body["return_logprob"] is True


def test_prompt_logprobs_are_read_after_the_start_token():
    from replay.server.apis.sglang_parse import parse_prompt_logprobs
    ids = np.array([7, 8, 9, 10])
    text = json.dumps({"meta_info": {"input_token_logprobs": [
        [None, 8, None], [-0.5, 9, None], [-1.25, 10, None]]}})
    values, misreported = parse_prompt_logprobs(text, "r", ids, 1)
    assert values.tolist() == [-0.5, -1.25] and misreported == ()


def test_a_prompt_id_reported_other_than_sent_is_named_not_refused():
    """SGLang reports the vocabulary's last id as 0: the values are the sent tokens', so the
    answer is read, and the id it got wrong is named (docs/findings/sglang-ids.md)."""
    from replay.server.apis.base import MisreportedId
    from replay.server.apis.sglang_parse import parse_prompt_logprobs
    text = json.dumps({"meta_info": {"input_token_logprobs": [
        [None, 8, None], [-0.5, 0, None], [-1.25, 10, None]]}})
    values, misreported = parse_prompt_logprobs(text, "r", np.array([7, 8, 4095, 10]), 1)
    assert values.tolist() == [-0.5, -1.25]
    assert misreported == (MisreportedId(position=2, sent=4095, reported=0),)


@pytest.mark.parametrize("entries", [
    [[None, 8, None], [-0.5, 9, None]],  # one short
    [[None, 8, None], [-0.5, "9", None], [-1.25, 10, None]],  # an id that is no int
    [[None, 8, None], [-0.5, -3, None], [-1.25, 10, None]],  # a negative id
    [[None, 8, None], ["x", 9, None], [-1.25, 10, None]],  # not a number
])
def test_prompt_logprobs_that_break_the_protocol_are_refused(entries):
    from replay.server.apis.sglang_parse import parse_prompt_logprobs
    text = json.dumps({"meta_info": {"input_token_logprobs": entries}})
    with pytest.raises(MalformedResponse):
        parse_prompt_logprobs(text, "r", np.array([7, 8, 9, 10]), 1)


# ---------------------------------------------------------------- the adapter conformance suite

SGLANG_CAPTURED = "embedded-sglang-radix"  # SGLang 0.5.23's own front end over the embedded engine
SGLANG_SERVED = tuple(f"{SGLANG_CAPTURED}__{e}" for e in ("server_info", "model_info"))


class TestSGLangConformance(AdapterConformance):
    """Answers captured by scripts/capture_sglang_answers.py."""

    api_name = "sglang"
    captures = tuple(Capture(f"{SGLANG_CAPTURED}__{a}", k, SGLANG_SERVED) for a, k in (
        ("generate_first", 3), ("generate_cached_extend", 3), ("generate_top0", 0)))
    vocab_size = None  # the server states none (no vocab_size in /model_info or /server_info)

    def sent(self, body):
        return (np.array(body["input_ids"], np.int32), body["sampling_params"]["max_new_tokens"],
                False)
