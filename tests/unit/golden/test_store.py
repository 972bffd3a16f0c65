"""Golden storage: exact round trips, integrity checks, refusals, atomic writes, redaction."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replay.golden import atomic_dir
from replay.golden import store as golden_store
from replay.utils.errors import GoldenFormatError, UsageError
from replay.golden.model import Golden, RecordedRequest
from replay.golden.store import (
    SCHEMA,
    array_sha256,
    attrs_sha256,
    golden_summary,
    narrow_if_exact,
    read_golden,
    verify_golden,
    widen_float32,
    write_golden,
)
from replay.utils.redact import redact_secrets

# ---------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------


def f32_values(n: int, seed: int = 0, shape: tuple[int, ...] | None = None) -> np.ndarray:
    """float64 values of float32s, like the server sends."""
    rng = np.random.default_rng(seed)
    vals = -np.abs(rng.standard_normal(shape or (n,))).astype(np.float32)
    return vals.astype(np.float64)


def make_request(
    i: int, *, group: int = 0, parent: int = -1, turn: int = 0, n: int = 4, k: int = 3,
    logprobs: np.ndarray | None = None, top_logprobs: np.ndarray | None = None,
) -> RecordedRequest:
    top = k > 0
    return RecordedRequest(
        id=f"g{group}/b{i}/t{turn}",
        group=group,
        branch=i,
        turn=turn,
        parent=parent,
        new_tokens=np.arange(100 + i, 103 + i, dtype=np.int32),
        max_new_tokens=n,
        output_ids=np.arange(200 + 10 * i, 200 + 10 * i + n, dtype=np.int32),
        logprobs=f32_values(n, seed=i) if logprobs is None else logprobs,
        top_ids=np.arange(n * k, dtype=np.int32).reshape(n, k) if top else None,
        top_logprobs=(f32_values(0, seed=i + 50, shape=(n, k)) if top_logprobs is None
                      else top_logprobs) if top else None,
        cached_tokens=7 * i,
        cached_details={"device": 4 * i, "host": 3 * i} if i else {},
        finish_reason="length",
    )


def make_golden(*, k: int = 3, n: int = 4, meta: dict[str, Any] | None = None,
                requests: list[RecordedRequest] | None = None) -> Golden:
    """Two groups; group 0 has a root with a child, group 1 a lone root."""
    reqs = requests if requests is not None else [
        make_request(0, group=0, n=n, k=k),
        make_request(1, group=1, n=n, k=k),
        make_request(2, group=0, parent=0, turn=1, n=n, k=k),
    ]
    return Golden(
        scenario={"name": "tiny", "groups": 2, "top_k": k, "seed": 3},
        prefixes=[np.arange(10, 18, dtype=np.int32), np.arange(50, 55, dtype=np.int32)],
        requests=reqs,
        sampling={"temperature": 0, "ignore_eos": True},
        meta={"server_url": "http://127.0.0.1:30000", "tool_version": "0.1.0",
              "created": "2026-08-20T12:00:00Z"} if meta is None else meta,
    )


def bits(a: np.ndarray | None) -> np.ndarray | None:
    return None if a is None else np.ascontiguousarray(a, dtype=np.float64).view(np.uint64)


def assert_identical(a: Golden, b: Golden) -> None:
    """Same tree, same ints, same float bit patterns, same metadata."""
    assert a.scenario == b.scenario and a.sampling == b.sampling and a.meta == b.meta
    assert len(a.prefixes) == len(b.prefixes)
    for p, q in zip(a.prefixes, b.prefixes):
        assert p.dtype == q.dtype == np.int32 and np.array_equal(p, q)
    assert len(a.requests) == len(b.requests)
    for r, s in zip(a.requests, b.requests):
        for name in ("id", "group", "branch", "turn", "parent", "max_new_tokens",
                     "cached_tokens", "cached_details", "finish_reason"):
            assert getattr(r, name) == getattr(s, name), name
        for name in ("new_tokens", "output_ids"):
            assert getattr(s, name).dtype == np.int32
            assert np.array_equal(getattr(r, name), getattr(s, name)), name
        assert s.logprobs.dtype == np.float64
        assert np.array_equal(bits(r.logprobs), bits(s.logprobs))
        assert (r.top_ids is None) == (s.top_ids is None)
        if r.top_ids is not None:
            assert np.array_equal(r.top_ids, s.top_ids)
            assert np.array_equal(bits(r.top_logprobs), bits(s.top_logprobs))


def round_trip(golden: Golden, tmp: Path) -> Golden:
    return read_golden(write_golden(golden, tmp / "g.zarr"))


def root_attrs(path: Path) -> dict[str, Any]:
    return json.loads((path / "zarr.json").read_text())["attributes"]


def rewrite_root_attrs(path: Path, attrs: dict[str, Any], *, reseal: bool = True) -> None:
    """Edit the root attributes; reseal recomputes the metadata checksum (a deliberate edit)."""
    if reseal:
        attrs["attrs_sha256"] = attrs_sha256(attrs)
    doc = json.loads((path / "zarr.json").read_text())
    doc["attributes"] = attrs
    (path / "zarr.json").write_text(json.dumps(doc))


def tamper_array(path: Path, name: str, data: np.ndarray) -> None:
    """Replace an array's content consistently (checksums updated), so only the structural
    checks can catch it."""
    arr = zarr.open_array(store=str(path / name), mode="r+")
    arr[...] = data
    attrs = root_attrs(path)
    attrs["arrays"][name]["sha256"] = array_sha256(np.asarray(data, dtype=arr.dtype))
    rewrite_root_attrs(path, attrs)


def chunk(path: Path, name: str) -> Path:
    files = [p for p in (path / name / "c").rglob("*") if p.is_file()]
    assert len(files) == 1
    return files[0]


def siblings(tmp: Path) -> list[str]:
    return sorted(p.name for p in tmp.iterdir())


@pytest.fixture(autouse=True)
def fsync_log(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """fsync costs ~4 ms a call on this disk and a write makes ~45: record the calls instead.
    A test that wants the real thing calls monkeypatch.undo()."""
    log: list[Path] = []
    monkeypatch.setattr(atomic_dir, "_fsync", log.append)
    return log


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One golden written once per module; tests get a copy (copying is far cheaper)."""
    return write_golden(make_golden(), tmp_path_factory.mktemp("pristine") / "g.zarr")


@pytest.fixture
def written(pristine: Path, tmp_path: Path) -> tuple[Golden, Path]:
    """A fresh copy of make_golden() on disk, free to corrupt."""
    return make_golden(), Path(shutil.copytree(pristine, tmp_path / "g.zarr"))


SPECIAL_F64_BITS = [
    0x0000000000000000, 0x8000000000000000,  # +0, -0
    0x0000000000000001, 0x800FFFFFFFFFFFFF,  # float64 subnormals
    0x7FF0000000000000, 0xFFF0000000000000,  # +-inf
    0x7FF8000000000000, 0xFFF8000000000001, 0x7FF0000000000001, 0x7FF4000000000000,  # NaNs
    0x36A0000000000000,  # smallest float32 subnormal as float64
    0x3FF0000000000000, 0xBFF0000000000001,
]

# ---------------------------------------------------------------------------------------------
# Round trips and exactness
# ---------------------------------------------------------------------------------------------


def test_round_trip_preserves_everything(tmp_path: Path) -> None:
    golden = make_golden()
    assert_identical(golden, round_trip(golden, tmp_path))


def test_round_trip_preserves_input_ids_of_the_tree(tmp_path: Path) -> None:
    golden = make_golden()
    back = round_trip(golden, tmp_path)
    for i in range(len(golden.requests)):
        assert np.array_equal(golden.input_ids(i), back.input_ids(i))


def test_tree_is_stored_once_not_copied(written: tuple[Golden, Path]) -> None:
    golden, path = written
    counts = root_attrs(path)["counts"]
    assert counts["prefix_tokens"] == sum(len(p) for p in golden.prefixes)
    assert counts["new_tokens"] == sum(len(r.new_tokens) for r in golden.requests)
    assert zarr.open_array(store=str(path / "new_tokens"), mode="r").shape == (counts["new_tokens"],)


def test_round_trip_preserves_negative_zero(tmp_path: Path) -> None:
    lp = np.array([-0.0, 0.0, -0.0, -1.5])
    back = round_trip(make_golden(requests=[make_request(0, logprobs=lp)]), tmp_path)
    assert np.array_equal(bits(back.requests[0].logprobs), bits(lp))
    assert root_attrs(tmp_path / "g.zarr")["arrays"]["logprobs"]["data_type"] == "float32"


def test_round_trip_preserves_nan_payloads(tmp_path: Path) -> None:
    lp = np.array([0x7FF8000000000000, 0xFFF8000000000123, 0x7FF0000000000001, 0x7FF4000000000000],
                  dtype=np.uint64).view(np.float64)
    back = round_trip(make_golden(requests=[make_request(0, logprobs=lp)]), tmp_path)
    assert np.array_equal(bits(back.requests[0].logprobs), bits(lp))


def test_round_trip_preserves_float32_subnormals_and_infinities(tmp_path: Path) -> None:
    f32 = np.array([1, 0x80000001, 0x007FFFFF, 0x7F800000, 0xFF800000, 0x7FC00001], dtype=np.uint32)
    lp = widen_float32(f32.view(np.float32))
    back = round_trip(make_golden(requests=[make_request(0, n=6, logprobs=lp)]), tmp_path)
    assert root_attrs(tmp_path / "g.zarr")["arrays"]["logprobs"]["data_type"] == "float32"
    assert np.array_equal(bits(back.requests[0].logprobs), bits(lp))


def test_float32_values_stored_as_float32(written: tuple[Golden, Path]) -> None:
    _, path = written
    arrays = root_attrs(path)["arrays"]
    assert arrays["logprobs"]["data_type"] == "float32"
    assert arrays["top_logprobs_rest"]["data_type"] == "float32"


def test_float64_only_values_stored_as_float64(tmp_path: Path) -> None:
    lp = f32_values(4)
    lp[2] = 0.1  # not a float32 value
    back = round_trip(make_golden(requests=[make_request(0, logprobs=lp)]), tmp_path)
    assert root_attrs(tmp_path / "g.zarr")["arrays"]["logprobs"]["data_type"] == "float64"
    assert np.array_equal(bits(back.requests[0].logprobs), bits(lp))


def test_logprobs_and_top_logprobs_choose_dtype_independently(tmp_path: Path) -> None:
    top = f32_values(0, shape=(4, 3))
    top[1, 1] = 1 / 3
    back = round_trip(make_golden(requests=[make_request(0, top_logprobs=top)]), tmp_path)
    arrays = root_attrs(tmp_path / "g.zarr")["arrays"]
    assert (arrays["logprobs"]["data_type"], arrays["top_logprobs_rest"]["data_type"]) == ("float32", "float64")
    assert np.array_equal(bits(back.requests[0].top_logprobs), bits(top))


def test_float32_input_arrays_are_stored_exactly(tmp_path: Path) -> None:
    lp32 = np.array([1, 0x80000000, 0x3F800001], dtype=np.uint32).view(np.float32)
    back = round_trip(make_golden(requests=[make_request(0, n=3, logprobs=lp32)]), tmp_path)
    assert np.array_equal(bits(back.requests[0].logprobs), bits(widen_float32(lp32)))


def test_top_k_zero_stores_no_top_arrays(tmp_path: Path) -> None:
    golden = make_golden(k=0)
    back = round_trip(golden, tmp_path)
    assert not (tmp_path / "g.zarr" / "top_ids").exists()
    assert not (tmp_path / "g.zarr" / "top_logprobs").exists()
    assert back.top_k == 0 and all(r.top_ids is None for r in back.requests)
    assert_identical(golden, back)


def test_request_without_top_logprobs_round_trips(tmp_path: Path) -> None:
    reqs = [make_request(0), make_request(1, group=1, k=0), make_request(2, parent=0, turn=1)]
    golden = make_golden(requests=reqs)
    back = round_trip(golden, tmp_path)
    assert back.requests[1].top_ids is None
    assert_identical(golden, back)


def test_empty_golden_round_trips(tmp_path: Path) -> None:
    golden = Golden(scenario={"name": "empty"}, prefixes=[], requests=[], sampling={}, meta={})
    assert_identical(golden, round_trip(golden, tmp_path))


def test_zero_length_outputs_round_trip(tmp_path: Path) -> None:
    golden = make_golden(n=0)
    assert_identical(golden, round_trip(golden, tmp_path))


u64_patterns = st.one_of(st.integers(0, 2**64 - 1), st.sampled_from(SPECIAL_F64_BITS))
u32_patterns = st.one_of(
    st.integers(0, 2**32 - 1),
    st.sampled_from([0, 0x80000000, 1, 0x807FFFFF, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFFFFFFF]),
)
DISK = settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@DISK
@given(st.lists(u64_patterns, min_size=1, max_size=24), st.lists(u64_patterns, min_size=6, max_size=6))
def test_round_trip_preserves_arbitrary_float64_bit_patterns(lp_bits: list[int], top_bits: list[int]) -> None:
    lp = np.array(lp_bits, dtype=np.uint64).view(np.float64)
    top = np.array(top_bits * len(lp_bits), dtype=np.uint64).view(np.float64).reshape(len(lp_bits), 6)
    golden = make_golden(requests=[make_request(0, n=len(lp), k=6, logprobs=lp, top_logprobs=top)])
    with tempfile.TemporaryDirectory() as tmp:
        back = round_trip(golden, Path(tmp))
    assert np.array_equal(bits(back.requests[0].logprobs), bits(lp))
    assert np.array_equal(bits(back.requests[0].top_logprobs), bits(top))


@DISK
@given(st.lists(u32_patterns, min_size=1, max_size=24))
def test_round_trip_preserves_arbitrary_float32_bit_patterns(patterns: list[int]) -> None:
    lp = widen_float32(np.array(patterns, dtype=np.uint32).view(np.float32))
    golden = make_golden(requests=[make_request(0, n=len(lp), logprobs=lp)])
    with tempfile.TemporaryDirectory() as tmp:
        back = round_trip(golden, Path(tmp))
    assert np.array_equal(bits(back.requests[0].logprobs), bits(lp))


@settings(max_examples=100, deadline=None)
@given(st.lists(u32_patterns, min_size=1, max_size=64))
def test_widen_float32_matches_ieee_widening(patterns: list[int]) -> None:
    f32 = np.array(patterns, dtype=np.uint32)
    signalling = ((f32 & 0x7F800000) == 0x7F800000) & ((f32 & 0x7FFFFF) != 0) & ((f32 & 0x400000) == 0)
    f32 = f32[~signalling]  # hardware quiets signalling NaNs; the bit widening keeps them
    ours = widen_float32(f32.view(np.float32)).view(np.uint64)
    assert np.array_equal(ours, f32.view(np.float32).astype(np.float64).view(np.uint64))


@settings(max_examples=100, deadline=None)
@given(st.lists(u64_patterns, max_size=64))
def test_narrow_if_exact_never_changes_bits(patterns: list[int]) -> None:
    values = np.array(patterns, dtype=np.uint64).view(np.float64)
    stored = narrow_if_exact(values)
    back = widen_float32(stored) if stored.dtype == np.float32 else stored
    assert np.array_equal(back.view(np.uint64), values.view(np.uint64))


# ---------------------------------------------------------------------------------------------
# Layout
# ---------------------------------------------------------------------------------------------


def test_each_array_is_one_bit_shuffled_zstd_chunk_file(written: tuple[Golden, Path]) -> None:
    _, path = written
    for name in root_attrs(path)["arrays"]:
        meta = json.loads((path / name / "zarr.json").read_text())
        assert [c["name"] for c in meta["codecs"]] == ["bytes", "blosc"]
        config = meta["codecs"][1]["configuration"]
        assert (config["cname"], config["shuffle"]) == ("zstd", "bitshuffle")
        chunk(path, name)


def test_golden_is_readable_with_plain_zarr_and_numpy(written: tuple[Golden, Path]) -> None:
    """The recipe in docs/golden-format.md."""
    golden, path = written
    z = zarr.open_group(str(path), mode="r", use_consolidated=False)
    a = z.attrs.asdict()
    cols = a["request_columns"]
    table = z["requests"][:]
    out_off = np.concatenate([[0], np.cumsum(table[:, cols.index("output_count")])])
    no = np.concatenate([[0], np.cumsum(table[:, cols.index("new_token_count")])])
    po = np.concatenate([[0], np.cumsum(a["prefix_lengths"])])
    req = a["request_ids"].index(golden.requests[2].id)
    lo, hi = out_off[req], out_off[req + 1]
    assert np.array_equal(bits(z["logprobs"][lo:hi].astype(np.float64)), bits(golden.requests[2].logprobs))
    top_ids = np.concatenate([z["output_ids"][:][:, None], z["top_ids_rest"][:]], axis=1)
    for row, token, _bits in a["top1_exceptions"]:
        top_ids[row, 0] = token
    assert np.array_equal(top_ids[lo:hi], golden.requests[2].top_ids)

    def input_ids(i: int) -> np.ndarray:
        g, p = table[i, cols.index("group")], table[i, cols.index("parent")]
        new = z["new_tokens"][no[i]:no[i + 1]]
        if p < 0:
            return np.concatenate([z["prefix_tokens"][po[g]:po[g + 1]], new])
        return np.concatenate([input_ids(p), z["output_ids"][out_off[p]:out_off[p + 1]], new])

    for i in range(len(golden.requests)):
        assert np.array_equal(input_ids(i), golden.input_ids(i))


# ---------------------------------------------------------------------------------------------
# Metadata and secrets
# ---------------------------------------------------------------------------------------------


def test_meta_is_stored_verbatim(tmp_path: Path) -> None:
    meta = {"server_url": "http://h:1", "server_info": {"page_size": 64, "hicache_ratio": 2.5,
            "disable_radix_cache": True, "version": "0.5.23", "model_path": None},
            "model_info": {"architectures": ["Qwen3ForCausalLM"]}, "platform": {"python": "3.11"},
            "api": "generate"}
    assert round_trip(make_golden(meta=meta), tmp_path).meta == meta


def test_secrets_are_redacted(tmp_path: Path) -> None:
    meta = {"server_info": {"api_key": "sk-1", "admin-api-key": "sk-2", "hf_token": "hf_x",
                            "nested": [{"access_token": "a", "Authorization": "Bearer b"}],
                            "apiKey": "c", "client_secret": "d", "password": "e", "HFToken": "f"},
            "headers": {"X-Api-Key": "g"}}
    back = round_trip(make_golden(meta=meta), tmp_path).meta
    info = back["server_info"]
    for key in ("api_key", "admin-api-key", "hf_token", "apiKey", "client_secret", "password", "HFToken"):
        assert info[key] == "<redacted>", key
    assert info["nested"] == [{"access_token": "<redacted>", "Authorization": "<redacted>"}]
    assert back["headers"] == {"X-Api-Key": "<redacted>"}
    assert "sk-1" not in (tmp_path / "g.zarr" / "zarr.json").read_text()


def test_token_counts_and_tokenizer_settings_are_not_redacted() -> None:
    info = {"cached_tokens": 512, "max_total_tokens": 4096, "max_prefill_tokens": 16384,
            "token_lo": 100, "tokenizer_path": "/m", "eos_token_id": 2, "bos_token": "<s>",
            "num_tokens": 3, "tokens": [1, 2], "skip_tokenizer_init": False}
    assert redact_secrets(info) == info


def test_absent_secret_stays_none() -> None:
    assert redact_secrets({"api_key": None}) == {"api_key": None}


def test_api_key_in_launch_command_is_redacted() -> None:
    cmd = ("HF_TOKEN=hf_abc python -m sglang.launch_server --model-path m --api-key sk-1 "
           "--disable-radix-cache --hf-token=hf_def --port 30000 --api-key 'quoted key'")
    out = redact_secrets({"launch_command": cmd})["launch_command"]
    assert out == ("HF_TOKEN=<redacted> python -m sglang.launch_server --model-path m --api-key "
                   "<redacted> --disable-radix-cache --hf-token=<redacted> --port 30000 "
                   "--api-key <redacted>")


def test_api_key_in_argv_list_is_redacted() -> None:
    argv = ["python", "-m", "sglang.launch_server", "--api-key", "sk-1", "--port", "1", "--api-key=sk-2"]
    assert redact_secrets({"argv": argv})["argv"] == [
        "python", "-m", "sglang.launch_server", "--api-key", "<redacted>", "--port", "1",
        "--api-key=<redacted>"]


def test_credentials_in_urls_and_headers_are_redacted() -> None:
    meta = {"server_url": "http://admin:hunter2@10.0.0.1:30000/x", "note": "Authorization: Bearer abc.def"}
    assert redact_secrets(meta) == {"server_url": "http://<redacted>@10.0.0.1:30000/x",
                                    "note": "Authorization: Bearer <redacted>"}


def test_nonfinite_meta_values_are_stored_as_strings(tmp_path: Path) -> None:
    meta = {"server_info": {"max_lora": float("inf"), "x": float("nan"), "y": -float("inf")}}
    back = round_trip(make_golden(meta=meta), tmp_path)
    assert back.meta == {"server_info": {"max_lora": "Infinity", "x": "NaN", "y": "-Infinity"}}


def test_sampling_that_is_not_plain_json_is_refused(tmp_path: Path) -> None:
    golden = make_golden()
    golden.sampling = {"temperature": float("nan")}
    with pytest.raises(GoldenFormatError, match="sampling is not plain JSON"):
        write_golden(golden, tmp_path / "g.zarr")


# ---------------------------------------------------------------------------------------------
# Refusing bad goldens on write
# ---------------------------------------------------------------------------------------------


def test_write_refuses_object_dtype_logprobs(tmp_path: Path) -> None:
    golden = make_golden(requests=[make_request(0, logprobs=np.array([-1.0, "x", 0, 0], dtype=object))])
    with pytest.raises(GoldenFormatError, match="logprobs has dtype object"):
        write_golden(golden, tmp_path / "g.zarr")
    assert siblings(tmp_path) == []


def test_write_refuses_non_topological_parents(tmp_path: Path) -> None:
    reqs = [make_request(0, parent=1, turn=1), make_request(1)]
    with pytest.raises(GoldenFormatError, match="not topological"):
        write_golden(make_golden(requests=reqs), tmp_path / "g.zarr")


def test_write_refuses_token_ids_outside_int32(tmp_path: Path) -> None:
    req = make_request(0)
    req.output_ids = np.array([1, 2, 3, 2**31], dtype=np.int64)
    with pytest.raises(GoldenFormatError, match="outside int32"):
        write_golden(make_golden(requests=[req]), tmp_path / "g.zarr")


def test_write_refuses_logprobs_not_aligned_with_output_ids(tmp_path: Path) -> None:
    req = make_request(0)
    req.logprobs = req.logprobs[:3]
    with pytest.raises(GoldenFormatError, match="logprobs shape"):
        write_golden(make_golden(requests=[req]), tmp_path / "g.zarr")


# ---------------------------------------------------------------------------------------------
# Refusing bad goldens on read
# ---------------------------------------------------------------------------------------------


def test_missing_path_is_reported(tmp_path: Path) -> None:
    with pytest.raises(GoldenFormatError, match="does not exist"):
        read_golden(tmp_path / "nope.zarr")


def test_file_instead_of_directory_is_reported(tmp_path: Path) -> None:
    (tmp_path / "g.zarr").write_text("{}")
    with pytest.raises(GoldenFormatError, match="not a directory"):
        read_golden(tmp_path / "g.zarr")


def test_directory_without_zarr_json_is_not_a_zarr_group(tmp_path: Path) -> None:
    (tmp_path / "g.zarr").mkdir()
    with pytest.raises(GoldenFormatError, match="not a zarr v3 group"):
        read_golden(tmp_path / "g.zarr")


def test_garbage_root_metadata_is_not_a_zarr_group(tmp_path: Path) -> None:
    (tmp_path / "g.zarr").mkdir()
    (tmp_path / "g.zarr" / "zarr.json").write_bytes(b"\x00garbage")
    with pytest.raises(GoldenFormatError, match="not a zarr v3 group"):
        read_golden(tmp_path / "g.zarr")


def test_zarr_group_without_schema_is_not_a_golden(tmp_path: Path) -> None:
    zarr.create_group(store=str(tmp_path / "g.zarr"), attributes={"x": 1})
    with pytest.raises(GoldenFormatError, match="not a golden"):
        read_golden(tmp_path / "g.zarr")


def test_newer_schema_is_refused(written: tuple[Golden, Path]) -> None:
    _, path = written
    attrs = root_attrs(path)
    attrs["schema"] = "golden-replay/golden/4"
    rewrite_root_attrs(path, attrs)
    with pytest.raises(GoldenFormatError) as err:
        read_golden(path)
    assert str(err.value) == (
        f"{path}: golden schema golden-replay/golden/4 is newer than this tool understands "
        "(golden-replay/golden/3): upgrade golden-replay")


def test_unknown_schema_is_refused(written: tuple[Golden, Path]) -> None:
    _, path = written
    attrs = root_attrs(path)
    attrs["schema"] = "someone-else/1"
    rewrite_root_attrs(path, attrs)
    with pytest.raises(GoldenFormatError, match="unknown golden schema 'someone-else/1'"):
        read_golden(path)


def test_edited_metadata_is_reported(written: tuple[Golden, Path]) -> None:
    _, path = written
    attrs = root_attrs(path)
    attrs["request_ids"][0] = "g9/b9/t9"
    rewrite_root_attrs(path, attrs, reseal=False)
    with pytest.raises(GoldenFormatError, match="metadata checksum mismatch"):
        read_golden(path)


def test_counts_that_do_not_match_the_arrays_are_reported(written: tuple[Golden, Path]) -> None:
    _, path = written
    attrs = root_attrs(path)
    attrs["counts"]["output_tokens"] += 1
    rewrite_root_attrs(path, attrs)
    with pytest.raises(GoldenFormatError, match="counts attribute"):
        read_golden(path)


def test_missing_array_is_reported(written: tuple[Golden, Path]) -> None:
    _, path = written
    for p in sorted((path / "output_ids").rglob("*"), reverse=True):
        p.unlink() if p.is_file() else p.rmdir()
    (path / "output_ids").rmdir()
    with pytest.raises(GoldenFormatError, match="array output_ids: missing"):
        read_golden(path)


def test_missing_chunk_is_reported(written: tuple[Golden, Path]) -> None:
    _, path = written
    chunk(path, "logprobs").unlink()
    with pytest.raises(GoldenFormatError, match="array logprobs: chunk missing"):
        read_golden(path, verify=False)


def test_truncated_chunk_is_reported(written: tuple[Golden, Path]) -> None:
    _, path = written
    c = chunk(path, "top_logprobs_rest")
    c.write_bytes(c.read_bytes()[:-7])
    with pytest.raises(GoldenFormatError, match="array top_logprobs_rest: unreadable chunk"):
        read_golden(path)


def test_bit_flipped_chunk_is_reported(written: tuple[Golden, Path]) -> None:
    _, path = written
    c = chunk(path, "logprobs")
    data = bytearray(c.read_bytes())
    data[len(data) // 2] ^= 0x10
    c.write_bytes(bytes(data))
    with pytest.raises(GoldenFormatError, match=r"array logprobs: (unreadable chunk|checksum mismatch)"):
        read_golden(path)


def test_checksum_catches_a_valid_chunk_with_wrong_data(tmp_path: Path) -> None:
    path = write_golden(make_golden(), tmp_path / "a.zarr")
    # Swap in a well-formed zstd chunk of the same dtype and shape but different content.
    swapped = make_golden()
    swapped.requests[0].output_ids = swapped.requests[0].output_ids + 1
    swapped_path = write_golden(swapped, tmp_path / "c.zarr")
    chunk(path, "output_ids").write_bytes(chunk(swapped_path, "output_ids").read_bytes())
    with pytest.raises(GoldenFormatError, match="array output_ids: checksum mismatch"):
        read_golden(path)
    assert read_golden(path, verify=False).requests[0].output_ids[0] == 201  # unchecked read


def test_output_counts_that_disagree_with_the_outputs_are_reported(written: tuple[Golden, Path]) -> None:
    _, path = written
    table = zarr.open_array(store=str(path / "requests"), mode="r")[:]
    table[1, -1] += 1  # output_count
    tamper_array(path, "requests", table)
    with pytest.raises(GoldenFormatError, match="output_count column, output_ids and logprobs disagree"):
        read_golden(path)


def test_negative_counts_are_reported(written: tuple[Golden, Path]) -> None:
    _, path = written
    table = zarr.open_array(store=str(path / "requests"), mode="r")[:]
    table[0, -2] = -1  # new_token_count
    tamper_array(path, "requests", table)
    with pytest.raises(GoldenFormatError, match="negative"):
        read_golden(path)


def test_malformed_top1_exception_is_reported(written: tuple[Golden, Path]) -> None:
    _, path = written
    attrs = root_attrs(path)
    attrs["top1_exceptions"][0][2] = "not hex"
    rewrite_root_attrs(path, attrs)
    with pytest.raises(GoldenFormatError, match="top1_exceptions: bad entry"):
        read_golden(path)


def test_non_topological_parents_are_reported(written: tuple[Golden, Path]) -> None:
    _, path = written
    table = zarr.open_array(store=str(path / "requests"), mode="r")[:]
    table[0, 3] = 2  # request 0's parent is a later request
    tamper_array(path, "requests", table)
    with pytest.raises(GoldenFormatError, match="not topological"):
        read_golden(path)


def test_object_dtype_array_is_refused(written: tuple[Golden, Path]) -> None:
    _, path = written
    meta_path = path / "logprobs" / "zarr.json"
    meta = json.loads(meta_path.read_text())
    meta["data_type"] = "string"
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(GoldenFormatError, match="array logprobs: data type 'string' refused"):
        read_golden(path)


def test_pickle_codec_is_refused_before_decoding(written: tuple[Golden, Path],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    _, path = written
    meta_path = path / "output_ids" / "zarr.json"
    meta = json.loads(meta_path.read_text())
    meta["codecs"].append({"name": "numcodecs.pickle", "configuration": {}})
    meta_path.write_text(json.dumps(meta))
    monkeypatch.setattr("pickle.loads", lambda *a, **k: pytest.fail("pickle was run"))
    with pytest.raises(GoldenFormatError, match=r"array output_ids: codecs .* refused"):
        read_golden(path)


def test_malformed_metadata_is_reported(written: tuple[Golden, Path]) -> None:
    _, path = written
    attrs = root_attrs(path)
    attrs["arrays"]["logprobs"]["shape"] = ["twelve"]
    rewrite_root_attrs(path, attrs)
    with pytest.raises(GoldenFormatError, match="malformed metadata: entry for array 'logprobs'"):
        read_golden(path)


def test_random_corruption_is_always_a_golden_format_error(pristine: Path, tmp_path: Path) -> None:
    """Flip one random bit in one random file, many times: reading either fails with
    GoldenFormatError or (a flip in JSON whitespace, say) returns the golden unchanged."""
    rng = np.random.default_rng(7)
    files = sorted(p.relative_to(pristine) for p in pristine.rglob("*") if p.is_file())
    expected = make_golden()
    for trial in range(12):
        copy = Path(shutil.copytree(pristine, tmp_path / f"c{trial}.zarr"))
        target = copy / files[rng.integers(len(files))]
        data = bytearray(target.read_bytes())
        data[rng.integers(len(data))] ^= 1 << int(rng.integers(8))
        target.write_bytes(bytes(data))
        problems = verify_golden(copy)
        try:
            back = read_golden(copy)
        except GoldenFormatError as exc:
            assert problems and "\n" not in str(exc) and "unexpected error" not in problems[0]
            continue
        assert problems == []
        assert_identical(expected, back)


def test_verify_golden_returns_no_problems_for_a_sound_golden(written: tuple[Golden, Path]) -> None:
    assert verify_golden(written[1]) == []


def test_verify_golden_reports_every_corrupt_array(written: tuple[Golden, Path]) -> None:
    _, path = written
    for name in ("logprobs", "new_tokens"):
        c = chunk(path, name)
        c.write_bytes(c.read_bytes()[:5])
    problems = verify_golden(path)
    assert len(problems) == 2
    assert problems[0].startswith("array new_tokens") and problems[1].startswith("array logprobs")


def test_verify_golden_reports_a_missing_path_without_raising(tmp_path: Path) -> None:
    assert verify_golden(tmp_path / "nope.zarr") == ["does not exist"]


def test_error_messages_are_one_line(written: tuple[Golden, Path]) -> None:
    _, path = written
    c = chunk(path, "top_ids_rest")
    c.write_bytes(b"\x02\x01\x21\x04" + b"\xff" * 40)  # a blosc header, then garbage
    with pytest.raises(GoldenFormatError) as err:
        read_golden(path)
    assert "\n" not in str(err.value) and "array top_ids_rest" in str(err.value)


# ---------------------------------------------------------------------------------------------
# Atomic writes
# ---------------------------------------------------------------------------------------------


def test_every_file_and_directory_is_fsynced_before_the_rename(
        tmp_path: Path, fsync_log: list[Path], monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, set[Path]] = {}

    def rename(src: Path, dst: Path) -> None:
        seen["tree"] = {src, *src.rglob("*")}
        seen["synced"] = set(fsync_log)
        os.rename(src, dst)

    monkeypatch.setattr(atomic_dir, "_rename", rename)
    write_golden(make_golden(), tmp_path / "g.zarr")
    assert seen["tree"] and seen["tree"] <= seen["synced"]
    assert fsync_log[-1] == tmp_path  # the parent directory, after the rename


def test_write_with_real_fsync_produces_a_sound_golden(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.undo()
    assert verify_golden(write_golden(make_golden(), tmp_path / "g.zarr")) == []


def test_write_returns_the_target_path(tmp_path: Path) -> None:
    assert write_golden(make_golden(), str(tmp_path / "g.zarr")) == tmp_path / "g.zarr"
    assert siblings(tmp_path) == ["g.zarr"]


def test_write_to_a_relative_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert write_golden(make_golden(), "g.zarr") == Path("g.zarr")
    assert verify_golden("g.zarr") == [] and siblings(tmp_path) == ["g.zarr"]


def test_write_creates_missing_parent_directories(tmp_path: Path) -> None:
    path = write_golden(make_golden(), tmp_path / "a" / "b" / "g.zarr")
    assert verify_golden(path) == []


def test_refuses_to_overwrite_without_force(written: tuple[Golden, Path]) -> None:
    _, path = written
    with pytest.raises(UsageError, match="exists; pass --force to overwrite"):
        write_golden(make_golden(k=0), path)
    assert read_golden(path).top_k == 3


def test_force_replaces_an_existing_golden(written: tuple[Golden, Path]) -> None:
    _, path = written
    write_golden(make_golden(k=0), path, force=True)
    assert read_golden(path).top_k == 0
    assert siblings(path.parent) == ["g.zarr"]


def test_force_refuses_to_replace_something_that_is_not_a_zarr_directory(tmp_path: Path) -> None:
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "notes.txt").write_text("keep me")
    with pytest.raises(UsageError, match="not a zarr directory"):
        write_golden(make_golden(), tmp_path / "home", force=True)
    assert (tmp_path / "home" / "notes.txt").read_text() == "keep me"


class Boom(BaseException):
    """Stands in for a crash: like KeyboardInterrupt, not an Exception."""


def fail_on_call(monkeypatch: pytest.MonkeyPatch, name: str, call: int, exc: BaseException) -> None:
    """Make <module>.<name> raise `exc` on its `call`-th call (1-based): the zarr writing in
    golden_store, the atomic publication steps in atomic_dir."""
    module = golden_store if hasattr(golden_store, name) else atomic_dir
    real = getattr(module, name)
    calls = {"n": 0}

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == call:
            raise exc
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, wrapper)


def test_crash_mid_write_leaves_no_golden(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fail_on_call(monkeypatch, "_write_array", 4, KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        write_golden(make_golden(), tmp_path / "g.zarr")
    assert siblings(tmp_path) == []  # no golden, no temp directory


def test_crash_mid_overwrite_keeps_the_old_golden(written: tuple[Golden, Path],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    golden, path = written
    fail_on_call(monkeypatch, "_fsync_tree", 1, Boom())
    with pytest.raises(Boom):
        write_golden(make_golden(k=0), path, force=True)
    assert_identical(golden, read_golden(path))
    assert siblings(path.parent) == ["g.zarr"]


def test_failed_swap_restores_the_old_golden(written: tuple[Golden, Path],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    golden, path = written
    fail_on_call(monkeypatch, "_rename", 2, Boom())  # old moved aside, new not yet in
    with pytest.raises(Boom):
        write_golden(make_golden(k=0), path, force=True)
    assert_identical(golden, read_golden(path))
    assert siblings(path.parent) == ["g.zarr"]


def test_leftover_temp_dir_from_a_killed_writer_is_ignored(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    # A killed writer's partial directory: no cleanup ran.
    monkeypatch.setattr(atomic_dir, "_remove", lambda path: None)
    fail_on_call(monkeypatch, "_write_array", 3, Boom())
    with pytest.raises(Boom):
        write_golden(make_golden(), tmp_path / "g.zarr")
    monkeypatch.undo()
    (leftover,) = siblings(tmp_path)
    assert leftover.startswith(".g.zarr.tmp-")
    assert verify_golden(tmp_path / "g.zarr") == ["does not exist"]
    golden = make_golden(k=0)
    assert_identical(golden, read_golden(write_golden(golden, tmp_path / "g.zarr")))
    assert siblings(tmp_path) == [leftover, "g.zarr"]
    assert verify_golden(tmp_path / "g.zarr") == []


# ---------------------------------------------------------------------------------------------
# Summary
# ---------------------------------------------------------------------------------------------


def test_summary_reports_counts_without_reading_arrays(written: tuple[Golden, Path]) -> None:
    _, path = written
    chunk(path, "logprobs").unlink()  # arrays are not read
    summary = golden_summary(path)
    assert summary["schema"] == SCHEMA
    assert summary["counts"] == {"groups": 2, "requests": 3, "prefix_tokens": 13,
                                 "new_tokens": 9, "output_tokens": 12, "top_rows": 12}
    assert summary["top_k"] == 3 and summary["dtypes"]["logprobs"] == "float32"
    assert summary["files"] > 0 and summary["bytes"] > 0


def test_summary_refuses_a_non_golden(tmp_path: Path) -> None:
    with pytest.raises(GoldenFormatError, match="does not exist"):
        golden_summary(tmp_path / "nope.zarr")


def test_written_golden_has_no_temp_files_left(written: tuple[Golden, Path]) -> None:
    _, path = written
    assert siblings(path.parent) == ["g.zarr"]
    assert not [p for p in path.rglob("*") if p.name.startswith(".")]


def test_reading_never_modifies_the_golden(written: tuple[Golden, Path]) -> None:
    _, path = written
    before = {p: p.stat().st_mtime_ns for p in path.rglob("*")}
    read_golden(path)
    verify_golden(path)
    golden_summary(path)
    assert {p: p.stat().st_mtime_ns for p in path.rglob("*")} == before
