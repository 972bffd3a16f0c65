"""The CPU launcher's L3 services (replay/sglang_cpu/l3_services.py): the flag is the launcher's
own and never reaches SGLang, and a service's address is merged into the backend's config."""

from __future__ import annotations

import json

import pytest

from replay.sglang_cpu import l3_services
from replay.sglang_cpu.l3_services import EXTRA_CONFIG_FLAG, Started, split_service, with_service


def test_the_service_flag_is_taken_out_of_sglangs_arguments():
    name, rest = split_service(["--model-path", "m", "--golden-l3-service", "mooncake", "--port", "1"])
    assert (name, rest) == ("mooncake", ["--model-path", "m", "--port", "1"])


def test_arguments_without_the_flag_pass_unchanged():
    assert split_service(["--port", "1"]) == (None, ["--port", "1"])


@pytest.mark.parametrize("argv", [["--golden-l3-service"], ["--golden-l3-service", "redis"]])
def test_an_unknown_or_missing_service_is_refused(argv):
    with pytest.raises(SystemExit, match="takes one of mooncake, hf3fs, seaweedfs"):
        split_service(argv)


def test_the_services_address_is_merged_into_an_extra_config_given(monkeypatch):
    monkeypatch.setitem(l3_services.SERVICES, "mooncake",
                        lambda: Started(None, {"master_server_address": "127.0.0.1:5", "a": 1}))
    _, argv = with_service("mooncake", ["--port", "1", EXTRA_CONFIG_FLAG, '{"a": 2, "b": 3}'])
    assert argv[:2] == ["--port", "1"] and argv[2] == EXTRA_CONFIG_FLAG
    assert json.loads(argv[3]) == {"master_server_address": "127.0.0.1:5", "a": 2, "b": 3}


def test_a_service_without_its_scratch_directory_says_what_is_missing(monkeypatch):
    monkeypatch.delenv("GOLDEN_L3_DIR", raising=False)
    with pytest.raises(SystemExit, match="GOLDEN_L3_DIR is not set"):
        l3_services.service_dir()


class Exited:
    """A service process that has already exited with code 3."""

    returncode = 3

    def poll(self) -> int:
        return self.returncode


def test_a_service_that_exits_before_it_listens_is_an_error():
    with pytest.raises(SystemExit, match="exited with code 3 before it listened"):
        l3_services.wait_listening(Exited(), l3_services.free_port(), "fake")


def test_the_filer_socket_sits_in_its_data_directory_when_the_path_fits(tmp_path):
    assert l3_services.filer_socket(tmp_path, 8888) == tmp_path / "filer.sock"


def test_a_data_directory_too_deep_for_a_unix_socket_puts_the_filer_socket_in_tmp(tmp_path):
    deep = tmp_path / ("d" * 120)
    sock = l3_services.filer_socket(deep, 8888)
    assert len(str(sock).encode()) <= l3_services.UNIX_PATH_MAX and "8888" in sock.name
