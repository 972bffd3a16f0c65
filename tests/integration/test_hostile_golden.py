"""A tampered or hostile golden is refused: it never verifies, never replays as PASS, never
exhausts memory, never follows a link, and a reader racing an update never sees a torn golden
(issue 14, classes 7, 8 and 10)."""

import copy
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from cli.main import app
from replay.golden.store import attrs_sha256, read_golden, verify_golden, write_golden
from tests.support.goldens import record_scenario
from tests.support.stub_server import StubConfig, StubServer
from tests.support import paths

runner = CliRunner()
ROOT = paths.REPO


@pytest.fixture(scope="module")
def golden(tmp_path_factory) -> Path:
    return record_scenario(tmp_path_factory.mktemp("g"), "deep", "deep")


def rewritten(golden: Path, tmp_path: Path, change) -> Path:
    """The golden changed in memory and written again: every checksum is recomputed."""
    g = read_golden(golden)
    change(g)
    out = tmp_path / "tampered.zarr"
    write_golden(g, out)
    return out


def refused(path: Path) -> str:
    res = runner.invoke(app, ["verify", str(path)])
    assert res.exit_code == 2, res.output
    with StubServer(StubConfig()) as stub:
        rep = runner.invoke(app, ["replay", str(path), "--server", stub.url, "-q"])
    assert rep.exit_code == 2 and "Traceback" not in rep.output, rep.output
    return res.output


# --- class 7: goldens that verify but mean nothing ----------------------------------------------


def _empty(g):
    g.requests = []


def _all_turns_zero(g):
    for r in g.requests:
        r.turn = 0


def _no_top_k(g):
    for r in g.requests:
        r.top_ids = r.top_logprobs = None


def _no_top_k_on_one_request(g):
    r = g.requests[1]
    r.top_ids = r.top_logprobs = None


def _empty_top_k_rows(g):
    r = g.requests[1]
    r.top_ids = np.full_like(r.top_ids, -1)
    r.top_logprobs = np.full_like(r.top_logprobs, np.nan)


def _duplicate_top_ids(g):
    r = g.requests[0]
    r.top_ids = r.top_ids.copy()
    r.top_ids[:, 1] = r.top_ids[:, 0]


def _output_longer_than_max_new_tokens(g):
    g.requests[-1].max_new_tokens = 5


def _set_logprob(value):
    def change(g):
        r = g.requests[1]
        r.logprobs = r.logprobs.copy()
        r.logprobs[2] = value
    return change


def _set_output_id(value):
    def change(g):
        r = g.requests[1]
        r.output_ids = r.output_ids.copy()
        r.output_ids[2] = value
    return change


@pytest.mark.parametrize("change, words", [
    (_empty, "no requests"),
    (_all_turns_zero, "conversation tree"),
    (_no_top_k, "top-k"),
    (_no_top_k_on_one_request, "no top-k"),
    (_empty_top_k_rows, "no top-k entry"),
    (_duplicate_top_ids, "twice"),
    (_output_longer_than_max_new_tokens, "max_new_tokens"),
    (_set_logprob(np.nan), "log-probability"),
    (_set_logprob(0.5), "log-probability"),
    (_set_logprob(-np.inf), "log-probability"),
    (_set_output_id(-3), "outside"),
    (_set_output_id(2**31 - 1), "outside"),
], ids=["empty", "turns-zero", "no-top-k", "no-top-k-one-request", "empty-top-k-rows",
        "duplicate-top", "length", "nan", "positive", "inf",
        "negative-id", "huge-id"])
def test_a_golden_that_verifies_byte_for_byte_but_means_nothing_is_refused(golden, tmp_path,
                                                                           change, words):
    assert words in refused(rewritten(golden, tmp_path, change))


def _send_no_top_k(n: int, ids: list[int], response: dict) -> dict:
    meta = response["meta_info"]
    meta["output_top_logprobs"] = [[] for _ in meta["output_top_logprobs"]]
    for key in [k for k in meta if "top" in k and "flat" in k]:
        del meta[key]
    return response


def test_a_reference_that_sends_no_top_k_when_asked_is_not_recorded(tmp_path):
    out = tmp_path / "g.zarr"
    with StubServer(StubConfig(radix=False, tamper=_send_no_top_k)) as stub:
        res = runner.invoke(app, ["record", "--server", stub.url, "--scenario", "single",
                                  "--out", str(out), "-q"])
    assert res.exit_code == 2 and "no top-k entry" in res.output, res.output
    assert not out.exists()


# --- class 8: small goldens that would exhaust memory ---------------------------------------------


def _edit_array_meta(path: Path, name: str, shape: list[int], chunk_shape: list[int]) -> None:
    meta_path = path / name / "zarr.json"
    meta = json.loads(meta_path.read_text())
    meta["shape"] = shape
    meta["chunk_grid"]["configuration"]["chunk_shape"] = chunk_shape
    meta_path.write_text(json.dumps(meta))
    root = json.loads((path / "zarr.json").read_text())
    root["attributes"]["arrays"][name]["shape"] = shape
    root["attributes"]["attrs_sha256"] = attrs_sha256(root["attributes"])
    (path / "zarr.json").write_text(json.dumps(root))


def _copy(golden: Path, tmp_path: Path) -> Path:
    out = tmp_path / "hostile.zarr"
    subprocess.run(["cp", "-r", str(golden), str(out)], check=True)
    return out


def _peak_rss_mib(*args: str) -> tuple[int, str]:
    """Run `golden ARGS` in a child; its exit code and peak resident memory, in MiB."""
    code = ("import resource, subprocess, sys; "
            f"p = subprocess.run([sys.executable, '-m', 'cli', *{list(args)!r}], "
            "capture_output=True, text=True, timeout=120); "
            "print(p.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024); "
            "print(p.stdout + p.stderr)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=150).stdout
    head, _, rest = out.partition("\n")
    rc, peak = head.split()
    return int(rc), int(peak), rest


def test_a_huge_declared_shape_in_one_element_chunks_is_refused_before_reading(golden, tmp_path):
    path = _copy(golden, tmp_path)
    _edit_array_meta(path, "logprobs", [100_000_000], [1])
    rc, peak, output = _peak_rss_mib("verify", str(path))
    assert rc == 2 and "logprobs" in output, output
    assert peak < 400, f"{peak} MiB"


def _zstd_rle_frame(size: int) -> bytes:
    """A zstd frame of `size` zero bytes made of RLE blocks: a few KB that expand to `size`."""
    block = 128 * 1024
    frame = bytearray(b"\x28\xb5\x2f\xfd" + bytes([0b1110_0000]) + size.to_bytes(8, "little"))
    left = size
    while left:
        n = min(block, left)
        left -= n
        header = (n << 3) | (1 << 1) | (1 if left == 0 else 0)  # RLE block, last flag
        frame += header.to_bytes(3, "little") + b"\x00"
    return bytes(frame)


def test_a_chunk_that_decompresses_past_its_size_is_refused_without_decompressing(golden,
                                                                                  tmp_path):
    path = _copy(golden, tmp_path)
    bomb = _zstd_rle_frame(1024 * 2**20)  # 1 GiB of zeros in 32 KB
    (path / "logprobs" / "c" / "0").write_bytes(bomb)
    rc, peak, output = _peak_rss_mib("verify", str(path))
    assert rc == 2 and "logprobs" in output, output
    assert peak < 400, f"{peak} MiB"


# --- class 10: links, torn reads --------------------------------------------------------------


def test_a_symbolic_link_inside_a_golden_is_refused_even_to_identical_bytes(golden, tmp_path):
    path = _copy(golden, tmp_path)
    chunk = path / "logprobs" / "c" / "0"
    chunk.unlink()
    chunk.symlink_to(golden / "logprobs" / "c" / "0")  # the very same bytes: checksums match
    assert any("symbolic link" in p for p in verify_golden(path))
    assert "symbolic link" in refused(path)


def test_a_reader_racing_an_update_never_sees_a_torn_golden(golden, tmp_path):
    first = read_golden(golden)
    second = copy.deepcopy(first)
    for r in second.requests:
        r.logprobs = np.nextafter(r.logprobs, -np.inf)  # a re-recording that changed every value
    target = tmp_path / "racing.zarr"
    write_golden(first, target)
    stop = threading.Event()

    def updater():
        n = 0
        while not stop.is_set():
            write_golden(second if n % 2 else first, target, force=True)
            n += 1

    thread = threading.Thread(target=updater)
    thread.start()
    errors = []
    try:
        for _ in range(60):
            try:
                read_golden(target)
            except Exception as exc:  # noqa: BLE001 - the test collects what a reader sees
                errors.append(str(exc))
    finally:
        stop.set()
        thread.join()
    assert errors == []


# --- issue 22: a layout-2 attribute past int32 ---------------------------------------------------


@pytest.mark.parametrize("token_id", [2**31, 2**63, -(2**31) - 1])
def test_a_top1_exception_token_id_past_int32_is_refused_by_name(golden, tmp_path, token_id):
    path = _copy(golden, tmp_path)
    root = json.loads((path / "zarr.json").read_text())
    attrs = root["attributes"]
    attrs["top1_exceptions"] = [[0, token_id, "bff0000000000000"]]
    attrs["attrs_sha256"] = attrs_sha256(attrs)
    (path / "zarr.json").write_text(json.dumps(root))
    text = refused(path)
    assert "top1_exceptions" in text and str(token_id) in text and "unexpected" not in text


def test_a_prefix_length_past_int64_is_refused_by_name(golden, tmp_path):
    path = _copy(golden, tmp_path)
    root = json.loads((path / "zarr.json").read_text())
    attrs = root["attributes"]
    attrs["prefix_lengths"] = [2**63] + attrs["prefix_lengths"][1:]
    attrs["attrs_sha256"] = attrs_sha256(attrs)
    (path / "zarr.json").write_text(json.dumps(root))
    text = refused(path)
    assert "prefix_lengths" in text and "unexpected" not in text


# --- a golden replaced while a replay reads it (the replay streams it from disk) -----------------


def test_a_golden_replaced_during_a_replay_is_an_error_never_a_verdict(tmp_path):
    from replay.golden.scenario import ScenarioSpec, build_plan
    from replay.jobs import session

    spec = ScenarioSpec(name="swap", groups=4, branches=2, prefix_len=16, suffix_len=4, turns=1,
                        turn_suffix_len=4, max_new_tokens=8, top_k=3, seed=3)
    path, other = tmp_path / "g.zarr", tmp_path / "other.zarr"
    with StubServer(StubConfig(radix=False)) as stub:
        for out, seed in ((path, 3), (other, 4)):  # chunked: 20 positions a chunk, 4 chunks
            session.record_golden(build_plan(ScenarioSpec(**{**spec.to_dict(), "seed": seed})),
                                  out, session.ServerTarget(url=stub.url), chunk_rows=20)

    def swap_after_the_first_turn(n: int, ids: list[int], response: dict) -> dict:
        if n == 8:  # the golden update's two renames, while the replay goes on
            path.rename(tmp_path / "old.zarr")
            other.rename(path)
        return response

    with StubServer(StubConfig(tamper=swap_after_the_first_turn)) as stub:
        res = runner.invoke(app, ["replay", str(path), "--server", stub.url, "-q",
                                  "--concurrency", "1"])
    assert res.exit_code == 2, res.output
    assert "changed while the golden was read" in " ".join(res.output.split())
    assert "pass" not in res.output.lower().split() and "Traceback" not in res.output
