"""The top-k form of the /generate body follows the SGLang release the server reports; a refusal
that names a flat key makes the client ask nested (replay/server/apis/sglang_wire.py)."""

import numpy as np
import pytest

from replay.server.apis.sglang import SGLangApi, generate_body
from replay.server.apis.sglang_wire import FLAT_KEYS, NEWEST, fallback_for, parse_version, wire_for

IDS = np.array([1, 2, 3], np.int32)
REFUSAL = "return_flat_raw_top_logprobs_b64 requires return_flat_raw_top_logprobs."


@pytest.mark.parametrize("text, release", [
    ("0.5.17", (0, 5, 17)), ("0.5.17.post1", (0, 5, 17)), ("v0.5.23rc0", (0, 5, 23)),
    ("0.5.24.dev3+g1a2b", (0, 5, 24)), ("1", (1,)),
])
def test_a_version_reads_as_its_leading_release_numbers(text, release):
    assert parse_version(text) == release


@pytest.mark.parametrize("text", [None, "", "dev", 17, ["0.5.17"]])
def test_a_missing_or_odd_version_reads_as_none(text):
    assert parse_version(text) is None


@pytest.mark.parametrize("version", ["0.5.14", "0.5.16", "0.5.17", "0.5.21", "0.5.21.post2"])
def test_releases_before_0_5_22_are_asked_for_nested_top_k(version):
    body = generate_body(IDS, 4, 5, wire_for(version))
    assert not any(k in body for k in FLAT_KEYS)
    assert body["top_logprobs_num"] == 5


@pytest.mark.parametrize("version", ["0.5.22", "0.5.23", "0.6.0"])
def test_releases_from_0_5_22_are_asked_for_flat_base64_output_top_k(version):
    body = generate_body(IDS, 4, 5, wire_for(version))
    assert body["return_flat_raw_output_top_logprobs"] is True
    assert body["return_flat_raw_top_logprobs_b64"] is True
    assert "return_flat_raw_top_logprobs" not in body


def test_a_server_that_reports_no_version_is_asked_for_the_newest_form():
    assert wire_for(None) == NEWEST and NEWEST.flat_output


def test_a_400_naming_a_flat_key_after_a_flat_body_falls_back_to_nested():
    body = generate_body(IDS, 4, 5)
    wire = fallback_for(body, 400, REFUSAL)
    assert wire is not None and not wire.flat_output
    assert "refused the flat form" in wire.describe()


@pytest.mark.parametrize("status, text", [(400, "input_ids too long"), (500, REFUSAL),
                                          (422, REFUSAL)])
def test_other_refusals_do_not_change_the_form(status, text):
    assert fallback_for(generate_body(IDS, 4, 5), status, text) is None


def test_a_refused_nested_body_is_not_resent():
    assert fallback_for(generate_body(IDS, 4, 5, wire_for("0.5.17")), 400, REFUSAL) is None


def test_the_adapter_resends_every_flat_body_refused_while_in_flight():
    """Requests sent together are refused together: the first refusal switches the form, and
    each refused flat body is still resent (judged on the body, not the current form)."""
    api = SGLangApi()
    first, second = api.request(IDS, 4, 5)[1], api.request(IDS, 4, 5)[1]
    assert api.refused(first, 400, REFUSAL) and not api.wire.flat_output
    assert api.refused(second, 400, REFUSAL)
    assert not any(k in api.request(IDS, 4, 5)[1] for k in FLAT_KEYS)
