"""repro.sh runs exactly the argv it was written from: hostile strings stay data, secrets stay out.

Each script is run by a real `sh` with GOLDEN pointing at a program that records the argv it was
given, so what is checked is what the shell would execute, not what the text looks like.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from replay.jobs.minimize.search import Candidate, Judgement, Result
from replay.jobs.minimize.session import Failure, MinimizeSettings, repro_script
from replay.jobs.minimize.repro_script import rerun_command, sh_word
from replay.run.replayer import ReplayOptions
from replay.server.target import ServerTarget
from replay.server.transport import ClientOptions

KEY = "sk-repro-9f8e7d6c5b4a"
HOSTILE = [
    "a\nexit 0\n#",  # a newline that would end a comment line and start a command
    "$(touch PWNED)",
    "`touch PWNED`",
    "it's \"quoted\"",
    "; touch PWNED; '",
    "${HOME}",
    "",
]


def run_script(tmp_path: Path, text: str, *args: str, env: dict[str, str] | None = None):
    """Run `text` as repro.sh; the argv `golden` got (after `replay GOLDEN`), and the result."""
    script = tmp_path / "repro.sh"
    script.write_text(text)
    dump = tmp_path / "dump.py"
    argv_file = tmp_path / "argv.json"
    dump.write_text(f"import json, sys\njson.dump(sys.argv[1:], open({str(argv_file)!r}, 'w'))\n")
    proc = subprocess.run(["sh", str(script), *args], cwd=tmp_path, capture_output=True,
                          text=True, timeout=30,
                          env={"PATH": os.environ["PATH"], "GOLDEN": f"{sys.executable} {dump}",
                               **(env or {})})
    argv = json.loads(argv_file.read_text()) if argv_file.exists() else None
    return argv, proc


def result() -> Result:
    cand = Candidate(keep=(0, 1), schedule="lockstep", concurrency=1, repeat=1)
    judged = Judgement(fails=True, failed_repeats=1)
    return Result(start=cand, final=cand, judgement=judged, steps=[], replays=2, seconds=1.0,
                  budget_exhausted=False, rerun=judged)


def script_for(target: ServerTarget, api_key: str | None = None) -> str:
    settings = MinimizeSettings(client=ClientOptions(api_key=api_key), api="sglang")
    return repro_script(target, settings, result(), Failure("over_reported"))


@pytest.mark.parametrize("word", HOSTILE, ids=repr)
def test_a_hostile_word_expands_to_itself(tmp_path, word):
    argv, proc = run_script(tmp_path, f"exec ${{GOLDEN}} {sh_word(word)}\n")
    assert argv == [word], proc.stderr
    assert not (tmp_path / "PWNED").exists()


@pytest.mark.parametrize("word", [w for w in HOSTILE if w], ids=repr)
def test_hostile_model_profile_and_server_args_are_passed_verbatim(tmp_path, word):
    target = ServerTarget(profile=f"/profiles/{word}.toml", model=word,
                          extra_args=(word, f"--flag={word}"))
    argv, proc = run_script(tmp_path, script_for(target))
    assert proc.returncode == 0, proc.stderr
    assert argv[:4] == ["replay", f"{tmp_path}/golden.zarr", "--api", "sglang"]
    assert argv[-6:] == ["--launch", f"/profiles/{word}.toml", "--model", word,
                         f"--server-arg={word}", f"--server-arg=--flag={word}"]
    assert not (tmp_path / "PWNED").exists()


def test_a_server_arg_api_key_is_read_from_the_environment_not_written(tmp_path):
    target = ServerTarget(profile="embedded-hicache",
                          extra_args=(f"--api-key={KEY}", "--admin-key", "adm-1234-secret"))
    text = script_for(target, api_key=KEY)
    assert KEY not in text and "adm-1234-secret" not in text
    argv, proc = run_script(tmp_path, text, env={"GOLDEN_API_KEY": KEY,
                                                 "GOLDEN_SECRET_1": "adm-1234-secret"})
    assert proc.returncode == 0, proc.stderr
    assert argv[-3:] == [f"--server-arg=--api-key={KEY}", "--server-arg=--admin-key",
                         "--server-arg=adm-1234-secret"]


def test_a_missing_secret_variable_stops_the_script_with_its_name(tmp_path):
    target = ServerTarget(profile="embedded-hicache", extra_args=(f"--api-key={KEY}",))
    argv, proc = run_script(tmp_path, script_for(target, api_key=KEY))
    assert argv is None and proc.returncode != 0
    assert "GOLDEN_API_KEY" in proc.stderr


def test_a_url_password_is_read_from_the_environment(tmp_path):
    text = script_for(ServerTarget(url="http://user:pw-s3cret@127.0.0.1:9/"))
    assert "pw-s3cret" not in text
    argv, _ = run_script(tmp_path, text, env={"GOLDEN_SERVER_PASSWORD": "pw-s3cret"})
    assert argv[-2:] == ["--server", "http://user:pw-s3cret@127.0.0.1:9/"]


def test_a_server_url_given_to_the_script_replaces_the_default(tmp_path):
    argv, _ = run_script(tmp_path, script_for(ServerTarget(profile="embedded-hicache")),
                         "http://127.0.0.1:1/$(touch PWNED)", "--report", "r.json")
    assert argv[-4:] == ["--server", "http://127.0.0.1:1/$(touch PWNED)", "--report", "r.json"]
    assert not (tmp_path / "PWNED").exists()


def test_a_matrix_rerun_command_holds_no_secret_and_runs_the_same_argv(tmp_path):
    target = ServerTarget(profile="sglang-hicache", model="$(touch PWNED)",
                          extra_args=(f"--api-key={KEY}",))
    line = rerun_command("g.zarr", target, ReplayOptions(repeat=2), ClientOptions(api_key=KEY),
                         api="sglang", shard="1/2")
    assert KEY not in line
    script = line.replace("golden replay", "exec ${GOLDEN} replay", 1) + "\n"
    argv, proc = run_script(tmp_path, script, env={"GOLDEN_API_KEY": KEY, "GOLDEN_SECRET_1": KEY})
    assert proc.returncode == 0, proc.stderr
    assert argv[:6] == ["replay", "g.zarr", "--launch", "sglang-hicache", "--model",
                        "$(touch PWNED)"]
    assert f"--server-arg=--api-key={KEY}" in argv and argv[-2:] == ["--shard", "1/2"]
    assert argv[argv.index("--repeat") + 1] == "2" and not (tmp_path / "PWNED").exists()
