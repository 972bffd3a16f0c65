"""`ServerTarget`: the one description of a server (a URL or a launch profile), checked once."""

from __future__ import annotations

from pathlib import Path

import pytest

from replay.server.target import ServerTarget, control_target
from replay.utils.errors import UsageError


@pytest.mark.parametrize("kwargs, message", [
    ({}, "exactly one of --server URL or --launch PROFILE"),
    ({"url": "http://x", "profile": "p"}, "exactly one"),
    ({"url": "http://x", "fault": "f"}, "only with --launch"),
    ({"url": "http://x", "extra_args": ("--x",)}, "only with --launch"),
    ({"url": "http://x", "attention_backend": "triton"}, "only with --launch"),
])
def test_a_server_target_checks_itself(kwargs, message):
    with pytest.raises(UsageError, match=message):
        ServerTarget(**kwargs)


def test_a_target_names_its_server_without_credentials():
    label = ServerTarget(url="http://u:secret@host:1").label
    assert "secret" not in label and label.endswith("host:1")
    assert ServerTarget(profile="/some/dir/mine.toml").label == "launch:mine"


def test_a_running_server_is_served_as_given(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with ServerTarget(url="http://127.0.0.1:1").serving() as url:
        assert url == "http://127.0.0.1:1"
    assert not list(tmp_path.iterdir())  # no log directory: nothing was launched


@pytest.mark.parametrize("given, flag", [({"model": "m"}, "--model"),
                                         ({"log_dir": Path("elsewhere")}, "--log-dir")])
def test_a_model_or_log_dir_for_a_running_server_is_refused_not_ignored(given, flag):
    with pytest.raises(UsageError, match=f"{flag} applies only with --launch"):
        ServerTarget(url="http://127.0.0.1:1", **given)


def test_a_launch_checks_the_model_before_starting_anything(tmp_path):
    with pytest.raises(UsageError, match="needs a model"):
        ServerTarget(profile="sglang-reference", log_dir=tmp_path).serving()
    assert not list(tmp_path.iterdir())


def test_a_launch_refuses_a_fault_its_profile_cannot_take(tmp_path):
    with pytest.raises(UsageError, match="takes no fault"):
        ServerTarget(profile="sglang-reference", model="m", fault="drift").launch_profile()


def test_a_launch_logs_beside_its_profile_name(tmp_path):
    target = ServerTarget(profile="embedded-reference", log_dir=tmp_path)
    assert target.log_path(target.launch_profile()) == tmp_path / "embedded-reference.log"


def test_a_running_server_has_no_profile_to_check():
    with pytest.raises(UsageError, match="not a launch profile"):
        ServerTarget(url="http://127.0.0.1:1").launch_profile()


def test_a_server_url_without_a_scheme_is_refused_with_the_url_it_probably_meant():
    with pytest.raises(UsageError) as refused:
        ServerTarget(url="localhost:30000")
    assert str(refused.value) == ("--server 'localhost:30000' has no scheme; did you mean "
                                  "http://localhost:30000?")


def test_a_control_server_url_without_a_scheme_is_refused_under_its_own_flag():
    with pytest.raises(UsageError, match="^--control-server 'h:1' has no scheme; did you mean "
                                         "http://h:1[?]$"):
        control_target(ServerTarget(profile="embedded-hicache"), control_server="h:1")


def test_a_scheme_less_url_is_refused_without_showing_its_password():
    with pytest.raises(UsageError) as refused:
        ServerTarget(url="user:secret@host:1")
    assert "secret" not in str(refused.value) and "http://" in str(refused.value)


def test_a_check_before_launching_refuses_a_misspelt_profile_and_takes_a_topology():
    with pytest.raises(UsageError, match="no launch profile or file named 'embeded-hicache'"):
        ServerTarget(profile="embeded-hicache").check()
    from replay.server.topology import builtin_topology_names

    ServerTarget(profile=builtin_topology_names()[0]).check()
    ServerTarget(url="http://x:1").check()
