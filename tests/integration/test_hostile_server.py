"""A hostile or broken server never produces a traceback, a wrong verdict or a leaked secret.

Each test reproduces one input that once broke the tool (issue 14, classes 1, 2, 4, 5, 9, 10):
the answer must be exit code 2 with one line, and the report (when asked for) must say `error`.
"""

import gzip
import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from tests.support.goldens import record_single
from tests.support.stub_server import StubConfig, StubServer
from tests.support import paths

runner = CliRunner()
SECRET = "sk-hostile-5f1e2d3c4b5a6978"


@pytest.fixture(scope="module")
def golden(tmp_path_factory) -> Path:
    return record_single(tmp_path_factory)


def replay(golden: Path, config: StubConfig, *extra: str, env=None, url=None):
    with StubServer(config) as stub:
        res = runner.invoke(app, ["replay", str(golden), "--server", url or stub.url, "-q",
                                  *extra], env=env)
    return res, stub


def strict_json(path: Path):
    def refuse(name):
        raise ValueError(f"non-standard JSON constant {name}")
    return json.loads(path.read_text(), parse_constant=refuse)


def one_line_error(res) -> str:
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output
    return res.output


# --- class 1: nothing unexpected becomes a traceback or exit 1 --------------------------------


def test_nan_and_infinity_in_server_info_still_give_a_strict_json_report(golden, tmp_path):
    report = tmp_path / "r.json"
    res, _ = replay(golden, StubConfig(extra_server_info={"load": math.nan, "cap": math.inf}),
                    "--report", str(report))
    assert res.exit_code == 0, res.output
    assert strict_json(report)["verdict"] == "pass"


@pytest.mark.parametrize("body", [
    b'{"text": "\xff\xfe\xfd", "output_ids": [1]}',  # not UTF-8
    b"[" * 200_000 + b"]" * 200_000,  # nested deeper than any parser's recursion limit
    b'{"output_ids": [' + b"9" * 5000 + b"]}",  # a 5000-digit integer
], ids=["not-utf8", "deep-nesting", "huge-int"])
def test_an_unparseable_body_is_an_error_with_an_error_report(golden, tmp_path, body):
    report = tmp_path / "r.json"
    res, _ = replay(golden, StubConfig(raw_bytes=body), "--report", str(report))
    one_line_error(res)
    assert strict_json(report)["verdict"] == "error"


def _huge_first_token(n, ids, resp):
    big = 2**40
    resp["output_ids"][0] = big
    resp["meta_info"]["output_token_logprobs"][0][1] = big
    resp["meta_info"]["output_top_logprobs"][0][0][1] = big
    return resp


def _huge_top_id(n, ids, resp):
    resp["meta_info"]["output_top_logprobs"][0][1][1] = 2**32 + 7  # wraps to 7 in int32
    return resp


@pytest.mark.parametrize("tamper", [_huge_first_token, _huge_top_id], ids=["output", "top-k"])
def test_a_token_id_past_int32_without_a_stated_vocabulary_is_an_error(golden, tamper):
    res, _ = replay(golden, StubConfig(state_vocab=False, tamper=tamper))
    assert "outside" in one_line_error(res)


@pytest.mark.parametrize("value", ["inf", "nan", "-1"])
def test_a_non_finite_timeout_is_refused(golden, value):
    res, _ = replay(golden, StubConfig(), "--timeout", value)
    assert "--timeout" in one_line_error(res)


def test_an_unexpected_exception_inside_a_replay_replaces_a_stale_pass_report(golden, tmp_path,
                                                                             monkeypatch):
    report = tmp_path / "r.json"
    res, _ = replay(golden, StubConfig(), "--report", str(report))
    assert res.exit_code == 0 and strict_json(report)["verdict"] == "pass"

    def broken(*args, **kwargs):
        raise RuntimeError("a bug nobody foresaw")

    monkeypatch.setattr("replay.run.replayer.judge", broken)
    res, _ = replay(golden, StubConfig(), "--report", str(report))
    assert "a bug nobody foresaw" in one_line_error(res)
    doc = strict_json(report)
    assert doc["verdict"] == "error" and "a bug nobody foresaw" in doc["error"]


def test_debug_shows_the_traceback_of_an_unexpected_exception(golden, monkeypatch):
    monkeypatch.setenv("GOLDEN_DEBUG", "")  # restored after the test: --debug sets it

    def broken(*args, **kwargs):
        raise RuntimeError("a bug nobody foresaw")

    monkeypatch.setattr("replay.run.replayer.judge", broken)
    with StubServer(StubConfig()) as stub:
        res = runner.invoke(app, ["--debug", "replay", str(golden), "--server", stub.url, "-q"])
    assert isinstance(res.exception, RuntimeError)


# --- class 2: secrets never leak ---------------------------------------------------------------


def _written(*paths: Path) -> str:
    return "".join(p.read_text() for p in paths if p.exists())


def test_an_api_key_echoed_in_an_error_body_is_never_printed_or_written(golden, tmp_path):
    files = [tmp_path / "r.json", tmp_path / "j.xml", tmp_path / "r.html"]
    res, stub = replay(golden, StubConfig(echo_auth=500), "--report", str(files[0]),
                       "--junit", str(files[1]), "--html", str(files[2]),
                       env={"GOLDEN_API_KEY": SECRET})
    assert stub.auth_headers == [f"Bearer {SECRET}"]  # it was sent, and echoed back
    assert SECRET not in one_line_error(res)
    assert SECRET not in _written(*files)
    assert strict_json(files[0])["verdict"] == "error"


def test_an_api_key_in_an_unknown_server_info_field_is_never_written(golden, tmp_path):
    report = tmp_path / "r.json"
    info = {"weird": SECRET, "nested": {"list": ["x", f"see {SECRET} here"]}}
    res, _ = replay(golden, StubConfig(extra_server_info=info), "--report", str(report),
                    "--api-key", SECRET)
    assert res.exit_code == 0, res.output
    assert SECRET not in report.read_text()


def test_an_api_key_in_server_info_never_reaches_a_recorded_golden(tmp_path):
    out = tmp_path / "k.zarr"
    with StubServer(StubConfig(radix=False, extra_server_info={"echo": SECRET})) as stub:
        res = runner.invoke(app, ["record", "--server", stub.url, "--scenario", "single",
                                  "--out", str(out), "--api-key", SECRET, "-q"])
    assert res.exit_code == 0, res.output
    assert not [f for f in out.rglob("*") if f.is_file() and SECRET.encode() in f.read_bytes()]


def test_a_password_in_the_server_url_is_never_printed(golden, tmp_path):
    report = tmp_path / "r.json"
    res, _ = replay(golden, StubConfig(), "--report", str(report),
                    url=f"http://user:{SECRET}@127.0.0.1:9")
    assert SECRET not in one_line_error(res)
    assert SECRET not in report.read_text()


# --- class 4: redirects ------------------------------------------------------------------------


def test_a_redirect_is_an_error_naming_the_location_and_is_not_followed(golden):
    with StubServer(StubConfig()) as other:
        res, _ = replay(golden, StubConfig(redirect=f"{other.url}/generate"))
        assert other.requests == 0
    assert f"{other.url}/generate" in one_line_error(res)


# --- class 5: response size --------------------------------------------------------------------


def test_a_never_ending_body_is_cut_off_by_size_not_by_the_timeout(golden):
    res, _ = replay(golden, StubConfig(endless=True), "--timeout", "120")
    assert "bytes" in one_line_error(res)


def test_a_small_compressed_body_that_inflates_past_the_bound_is_cut_off(golden):
    bomb = gzip.compress(b'{"text": "' + b" " * (64 * 2**20) + b'"}', compresslevel=1)
    assert len(bomb) < 2**20  # it arrives small and declares its (compressed) length
    res, _ = replay(golden, StubConfig(raw_bytes=bomb, raw_encoding="gzip"))
    assert "bytes" in one_line_error(res)


# --- class 9: a reference that is not a probability distribution --------------------------------


def _bad_logprob(value):
    def tamper(n, ids, resp):
        resp["meta_info"]["output_token_logprobs"][3][0] = value
        return resp
    return tamper


@pytest.mark.parametrize("value", [math.nan, math.inf, 0.25], ids=["nan", "inf", "positive"])
def test_a_reference_with_a_nan_infinite_or_positive_logprob_is_refused(tmp_path, value):
    out = tmp_path / "bad.zarr"
    with StubServer(StubConfig(radix=False, tamper=_bad_logprob(value))) as stub:
        res = runner.invoke(app, ["record", "--server", stub.url, "--scenario", "single",
                                  "--out", str(out), "-q"])
    text = one_line_error(res)
    assert "g0/b0/t0" in text and "position 3" in text
    assert not out.exists()


# --- class 10: strict server settings, a model that changes mid-recording ----------------------


def test_a_string_for_disable_radix_cache_is_an_error_not_a_disabled_check(golden):
    res, _ = replay(golden, StubConfig(extra_server_info={"disable_radix_cache": "false"}))
    assert "disable_radix_cache" in one_line_error(res)


def test_a_model_change_during_a_recording_writes_nothing(tmp_path):
    out = tmp_path / "m.zarr"
    config = StubConfig(radix=False)

    def swap_model(n, ids, resp):
        config.model_path = "stub/another-model"
        return resp

    config.tamper = swap_model
    with StubServer(config) as stub:
        res = runner.invoke(app, ["record", "--server", stub.url, "--scenario", "single",
                                  "--out", str(out), "-q"])
    assert "stub/another-model" in one_line_error(res)
    assert not out.exists()


# --- class 1 in the other adapters' parsers -----------------------------------------------------


def test_llamacpp_parser_refuses_a_logprob_past_float64_as_malformed():
    from replay.server.apis.llamacpp import LlamaCppApi
    from replay.utils.errors import MalformedResponse

    answer = json.loads((paths.DATA / "apis"
                         / "tiny-llama-ascii__completion_reference.json").read_text())
    answer["completion_probabilities"][0]["logprob"] = 10**400
    n = len(answer["completion_probabilities"])
    with pytest.raises(MalformedResponse, match="float64"):
        LlamaCppApi().parse(answer, "g0/b0/t0", max_new_tokens=n, top_k=3, vocab_size=768)


def test_openai_parser_refuses_a_5000_digit_token_id_as_malformed():
    from replay.server.apis.openai import _text_id
    from replay.utils.errors import MalformedResponse

    with pytest.raises(MalformedResponse, match="token_id:N"):
        _text_id("token_id:" + "9" * 5000, "g0/b0/t0", "logprobs.tokens[0]", None)


# --- issue 22: odd values that once became "unexpected ..." --------------------------------------


def _token_id(value):
    def tamper(n, ids, resp):
        resp["output_ids"][0] = value
        resp["meta_info"]["output_token_logprobs"][0][1] = value
        return resp
    return tamper


@pytest.mark.parametrize("value", [2**63, 2**64 + 5, -(2**63) - 1], ids=["2^63", "2^64+5", "-2^63-1"])
@pytest.mark.parametrize("state_vocab", [True, False], ids=["vocab", "no-vocab"])
def test_a_token_id_past_int64_is_a_named_error(golden, value, state_vocab):
    res, _ = replay(golden, StubConfig(state_vocab=state_vocab, tamper=_token_id(value)))
    text = one_line_error(res)
    assert "unexpected" not in text and "g0/b0/t0" in text


@pytest.mark.parametrize("depth", [5000, 50_000])
def test_a_deeply_nested_answer_is_a_named_error(golden, depth):
    body = (b'{"text": "", "output_ids": [1], "meta_info": {"extra": ' + b"[" * depth
            + b"]" * depth + b"}}")
    res, _ = replay(golden, StubConfig(raw_bytes=body))
    text = one_line_error(res)
    assert "unexpected" not in text and "nest" in text


def test_url_credentials_together_with_an_api_key_are_refused(golden):
    res, stub = replay(golden, StubConfig(), "--api-key", SECRET, url="http://u:pw@127.0.0.1:9")
    text = one_line_error(res)
    assert "--api-key" in text and "credentials" in text and SECRET not in text


def test_cached_tokens_past_int32_are_refused_when_the_answer_arrives(tmp_path):
    out = tmp_path / "c.zarr"

    def tamper(n, ids, resp):
        resp["meta_info"]["cached_tokens"] = 2**31
        return resp

    config = StubConfig(radix=False, tamper=tamper)
    with StubServer(config) as stub:
        res = runner.invoke(app, ["record", "--server", stub.url, "--scenario", "deep",
                                  "--out", str(out), "--concurrency", "1", "-q"])
    text = one_line_error(res)
    assert "cached_tokens" in text and "unexpected" not in text
    assert stub.requests == 1  # refused at the first answer, not after the whole recording
    assert not out.exists()
