"""Engine settings set on a command line: one table of flags (OVERRIDE_FLAGS) for the engine's
own server, the SGLang front end and the engines `golden demo` and the detection matrix launch."""

import argparse

from replay.engine.options import (
    OVERRIDE_FLAGS, SERVER_ARG_OVERRIDES, add_override_flags, overrides_given, profile_options,
)
from replay.jobs.detection import CI_QUICK_ENGINE, engine_flags
from replay.sglang_frontend.args import SHARED_FIELDS


def parsed(argv: list[str], names: tuple[str, ...] = tuple(OVERRIDE_FLAGS)) -> dict:
    parser = argparse.ArgumentParser()
    add_override_flags(parser, names)
    return overrides_given(parser.parse_args(argv))


def test_the_flags_a_launched_engine_is_given_parse_back_into_the_same_settings():
    assert parsed(list(engine_flags(CI_QUICK_ENGINE))) == {
        **dict.fromkeys(OVERRIDE_FLAGS), **CI_QUICK_ENGINE}


def test_flags_not_given_leave_the_profiles_settings():
    options = profile_options("hicache", **parsed([]))
    assert options == profile_options("hicache")


def test_the_front_end_takes_only_what_sglangs_server_args_carry_to_its_engine():
    assert set(SERVER_ARG_OVERRIDES) <= set(SHARED_FIELDS)
    assert set(CI_QUICK_ENGINE) <= set(SERVER_ARG_OVERRIDES)  # ci-quick replays through it too
    assert set(parsed(["--page-size", "16"], SERVER_ARG_OVERRIDES)) == set(SERVER_ARG_OVERRIDES)
