"""`golden history` and the `--history` / GOLDEN_HISTORY feed, through the CLI, against the
in-process protocol stub (or the stub launched as a server by a launch profile), once on a
SQLite file and once on a real PostgreSQL database."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from replay.golden.store import content_checksum, read_golden
from tests.support import paths
from tests.support.closed_pipe import into_closed_pipe
from tests.support.history_reports import run_report, sample, write
from tests.support.postgres import free_port, history_url, postgres  # noqa: F401 - fixtures
from tests.support.stub_process import drift
from tests.support.stub_server import StubConfig, StubServer

HISTORY_ENV = "GOLDEN_HISTORY"
runner = CliRunner()


def cli(*args: str, env: dict[str, str | None] | None = None):
    """`golden ARGS`, with GOLDEN_HISTORY unset unless `env` sets it (and restored after)."""
    return runner.invoke(app, list(args), env={HISTORY_ENV: None, **(env or {})})


SCENARIO = """groups = 2
branches = 1
prefix_len = 24
suffix_len = 4
turns = 2
turn_suffix_len = 4
max_new_tokens = 6
top_k = 2
"""


@pytest.fixture(scope="module")
def golden(tmp_path_factory) -> Path:
    """Two conversations (so that it can be replayed in two shards), recorded by the CLI."""
    d = tmp_path_factory.mktemp("golden")
    (d / "s.toml").write_text(SCENARIO)
    out = d / "s.zarr"
    with StubServer(StubConfig(radix=False)) as stub:
        res = cli("record", "--server", stub.url, "--scenario", str(d / "s.toml"),
                         "--out", str(out), "--quiet")
    assert res.exit_code == 0, res.output
    return out


def drift_everywhere(n: int, ids: list[int], resp: dict) -> dict:
    return drift(resp)


def replay(golden: Path, version: str, *extra: str, history: str | None = None,
           drift: bool = False, env: dict[str, str | None] | None = None):
    config = StubConfig(extra_server_info={"version": version},
                        tamper=drift_everywhere if drift else None)
    flag = ["--history", history] if history else []
    with StubServer(config) as stub:
        return cli(*flag, "replay", str(golden), "--server", stub.url, "--quiet", *extra,
                          env=env)


def listed(url: str, *extra: str) -> list[dict]:
    res = cli("history", "--db", url, "--json", *extra)
    assert res.exit_code == 0, res.output
    return json.loads(res.output)


def test_the_history_flag_adds_each_replay_keyed_by_the_golden_content(history_url, golden):
    assert replay(golden, "0.5.1", history=history_url).exit_code == 0
    assert replay(golden, "0.5.2", history=history_url, drift=True).exit_code == 1
    res = cli("history", "show", str(golden), "--db", history_url, "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["golden_keys"] == [content_checksum(read_golden(golden))]
    assert [(r["verdict"], r["server_version"]) for r in doc["timeline"]] == [
        ("pass", "0.5.1"), ("fail", "0.5.2")]
    assert doc["bisect"]["first_failing"] == "0.5.2" and doc["bisect"]["last_passing"] == "0.5.1"


def test_the_environment_variable_feeds_every_report_written(history_url, golden, tmp_path):
    """Shard runs and their merge: each report written is a run (the merged one marked)."""
    env = {HISTORY_ENV: history_url}
    shards = [tmp_path / f"shard{i}.json" for i in (1, 2)]
    with StubServer(StubConfig(extra_server_info={"version": "0.5.1"})) as stub:  # one server
        for i, report in enumerate(shards, 1):
            res = cli("replay", str(golden), "--server", stub.url, "--quiet", "--shard",
                             f"{i}/2", "--report", str(report), env=env)
            assert res.exit_code == 0, res.output
    res = cli("report", "--merge", *map(str, shards), env=env)
    assert res.exit_code == 0, res.output
    runs = listed(history_url)
    assert sorted(((r["shard"], r["merged"]) for r in runs), key=str) == [
        ("1/2", False), ("2/2", False), (None, True)]
    assert len({r["golden_key"] for r in runs}) == 1  # shards and merge: one golden


def test_a_history_that_cannot_be_reached_fails_the_command_but_keeps_the_report(golden, tmp_path):
    report = tmp_path / "r.json"
    url = f"postgresql://golden:hunter2@127.0.0.1:{free_port()}/none"
    res = replay(golden, "0.5.1", "--report", str(report), history=url)
    assert res.exit_code == 2
    assert json.loads(report.read_text())["verdict"] == "pass"
    [line] = [x for x in res.output.splitlines() if x.startswith("error:")]
    assert "127.0.0.1" in line and "hunter2" not in res.output


def test_reports_made_elsewhere_are_added_and_listed(history_url, tmp_path):
    files = [write(run_report(version="0.5.1", hour=0), tmp_path / "a.json"),
             write(run_report(version="0.5.2", hour=1, failing=("g0/b0/t1",)), tmp_path / "b.json"),
             write(sample("matrix"), tmp_path / "m.json")]
    res = cli("history", "add", *map(str, files), "--db", history_url)
    assert res.exit_code == 0, res.output
    assert "added 6 run(s), 0 already in the history" in res.output
    runs = listed(history_url, "--golden", "branching.zarr")
    assert [(r["verdict"], r["server_version"]) for r in runs] == [("fail", "0.5.2"), ("pass", "0.5.1")]
    assert len(listed(history_url, "--limit", "3")) == 3


def test_a_report_added_twice_is_one_run(history_url, tmp_path):
    report = write(run_report(), tmp_path / "a.json")
    assert cli("history", "add", str(report), "--db", history_url).exit_code == 0
    res = cli("history", "add", str(report), str(report), "--db", history_url)
    assert res.exit_code == 0 and "added 0 run(s), 2 already in the history" in res.output
    assert len(listed(history_url)) == 1


def _hostile(tmp_path: Path, kind: str) -> Path:
    path = tmp_path / f"{kind}.json"
    doc = run_report(hour=7, failing=("g0/b0/t1",))
    if kind == "truncated":
        path.write_text(json.dumps(doc)[:500])
    elif kind == "nan":
        path.write_text(json.dumps(doc).replace('"mean_kl": 0.0', '"mean_kl": NaN', 1))
    elif kind == "false-pass":
        write({**doc, "verdict": "pass"}, path)
    elif kind == "nul":
        doc["requests"][0]["id"] = "g0\u0000"
        write(doc, path)
    elif kind == "deep":
        path.write_text("[" * 50_000 + "]" * 50_000)
    elif kind == "not-a-report":
        write({"schema": "other/1", "verdict": "pass"}, path)
    elif kind == "huge-int":
        doc["requests"][0]["cached_tokens"] = 10**30
        write(doc, path)
    return path


@pytest.mark.parametrize("kind", ["truncated", "nan", "false-pass", "nul", "deep",
                                  "not-a-report", "huge-int"])
def test_a_corrupt_or_hostile_report_is_refused_and_the_history_is_unchanged(history_url, tmp_path, kind):
    good = write(run_report(hour=1), tmp_path / "good.json")
    assert cli("history", "add", str(good), "--db", history_url).exit_code == 0
    before = listed(history_url)
    other = write(run_report(hour=2), tmp_path / "other.json")
    res = cli("history", "add", str(other), str(_hostile(tmp_path, kind)), "--db", history_url)
    assert res.exit_code == 2
    assert res.output.startswith("error: ") and len(res.output.strip().splitlines()) == 1
    assert "Traceback" not in res.output
    assert listed(history_url) == before  # not even the good report beside it


def test_show_prints_the_timeline_bisect_flakes_and_coverage(history_url, tmp_path):
    files = [write(run_report(version=v, hour=h, failing=f), tmp_path / f"{h}.json")
             for v, h, f in (("0.5.1", 0, ()), ("0.5.2", 1, ("g1/b0/t1",)), ("0.5.2", 2, ()))]
    cli("history", "add", *map(str, files), "--db", history_url)
    res = cli("history", "show", "branching.zarr", "--db", history_url)
    assert res.exit_code == 0, res.output
    out = res.output
    assert "3 run(s) (1 fail, 2 pass)" in out
    assert "bisect: first fails on 0.5.2, after 0.5.1 passed; it also passed there (flaky)" in out
    assert "g1/b0/t1: failed 1/3 (33%), 2 flip(s), flaky" in out
    tiers = sample("passing")["summary"]["cached_tokens_by_tier"]  # each run's, three runs
    assert "tiers covered (tokens): " + ", ".join(f"{t} {3 * n}" for t, n in sorted(tiers.items())) in out


def test_the_page_command_writes_a_self_contained_page(history_url, tmp_path):
    cli("history", "add", str(write(run_report(), tmp_path / "a.json")), "--db", history_url)
    res = cli("history", "page", "--out", str(tmp_path / "site"), "--db", history_url)
    assert res.exit_code == 0, res.output
    page = (tmp_path / "site" / "index.html").read_text()
    assert page.count('<svg class="plot') == 3 and "goldens/branching.zarr" in page


def test_reading_a_history_that_does_not_exist_is_an_error(tmp_path):
    res = cli("history", "--db", str(tmp_path / "typo.sqlite"))
    assert res.exit_code == 2 and "there is no history at" in res.output
    assert not (tmp_path / "typo.sqlite").exists()


def test_show_of_a_golden_the_history_lacks_is_an_error(history_url, tmp_path):
    cli("history", "add", str(write(run_report(), tmp_path / "a.json")), "--db", history_url)
    res = cli("history", "show", "nothing.zarr", "--db", history_url)
    assert res.exit_code == 2 and "has no run of 'nothing.zarr'" in res.output


def test_the_cli_loads_no_database_library_until_a_history_command_runs():
    code = ("import sys, cli.main; "
            "print(sorted(m for m in ('sqlalchemy', 'alembic', 'psycopg') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=paths.REPO, check=True).stdout
    assert out.strip() == "[]"


def test_without_the_history_extra_the_command_says_how_to_install_it(tmp_path):
    report = write(run_report(), tmp_path / "a.json")
    code = ("import sys; sys.modules['sqlalchemy'] = None; "  # as if it were not installed
            f"sys.argv = ['golden', 'history', 'add', {str(report)!r}, '--db', 'h.sqlite']; "
            "from cli.main import app; app()")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=tmp_path, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(paths.REPO)})
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("error: the results history needs its extra: pip install "
                                   "'golden-replay[history]' (sqlalchemy is missing)")


def test_prune_deletes_the_runs_from_before_a_date(history_url, tmp_path):
    files = [write(run_report(hour=h), tmp_path / f"{h}.json") for h in (0, 30, 60)]
    cli("history", "add", *map(str, files), "--db", history_url)
    res = cli("history", "prune", "--before", "2026-09-03", "--db", history_url)
    assert res.exit_code == 0 and "deleted 2 run(s)" in res.output
    assert [r["at"] for r in listed(history_url)] == ["2026-09-03T12:00:00Z"]
    bad = cli("history", "prune", "--before", "last week", "--db", history_url)
    assert bad.exit_code == 2 and "not an ISO date" in bad.output


# --- the defects of issue 34, each first seen failing on the old code -------------------------


def stub_profile(tmp_path: Path, *extra: str) -> Path:
    """A launch profile that starts the protocol stub as a server process on a random port."""
    words = ", ".join(f'"{w}"' for w in ["{python}", "-m", "tests.support.stub_process",
                                         "--port", "{port}", *extra])
    path = tmp_path / "stub-launch.toml"
    path.write_text(f'description = "the protocol stub, launched"\ncommand = [{words}]\n'
                    'cwd = "{replay_root}"\nhealth = "/server_info"\nwarmup = false\n'
                    "startup_timeout = 120\n")
    return path


def test_two_launched_replays_of_one_profile_share_a_flags_key_and_a_flip_is_flaky(
        history_url, golden, tmp_path):
    """Each launch has its own port, pid, launch command, seed and scratch directory; only the
    settings key the server. The second launch drifts: every request flips, so each is flaky."""
    flip = tmp_path / "drift-now"
    profile = stub_profile(tmp_path, "--drift-file", str(flip))
    logs = str(tmp_path / "logs")
    first = cli("--history", history_url, "replay", str(golden), "--launch", str(profile),
                "--log-dir", logs, "--quiet")
    flip.touch()
    second = cli("--history", history_url, "replay", str(golden), "--launch", str(profile),
                 "--log-dir", logs, "--quiet")
    assert (first.exit_code, second.exit_code) == (0, 1), first.output + second.output
    runs = listed(history_url)
    assert len({r["flags"] for r in runs}) == 1
    assert {r["profile"] for r in runs} == {"stub-launch"}
    doc = json.loads(cli("history", "show", str(golden), "--db", history_url, "--json").output)
    assert doc["requests"] and all(r["flaky"] for r in doc["requests"])
    [version] = doc["versions"]
    assert version["flaky_requests"] == len(doc["requests"]) and version["flake_rate"] == 1.0
    shown = cli("history", "show", str(golden), "--db", history_url)
    assert f"{doc['requests'][0]['id']}: failed 1/2 (50%), 1 flip(s), flaky" in shown.output


def test_a_launched_server_inherits_no_history_or_debug_setting(golden, tmp_path):
    """Given as options and in the environment, the history URL (with its password) and the
    debug switch never reach the launched server's environment."""
    env_out = tmp_path / "server-env.json"
    profile = stub_profile(tmp_path, "--env-out", str(env_out))
    url = str(tmp_path / "h.sqlite")
    res = cli("--history", url, "--debug", "replay", str(golden), "--launch", str(profile),
              "--log-dir", str(tmp_path / "logs"), "--quiet",
              env={HISTORY_ENV: "postgresql://ci:hunter2@db.lab/golden", "GOLDEN_DEBUG": "1",
                   "PGPASSWORD": "hunter3"})
    assert res.exit_code == 0, res.output
    seen = json.loads(env_out.read_text())
    assert not {"GOLDEN_HISTORY", "GOLDEN_DEBUG", "PGPASSWORD"} & set(seen)
    assert not [k for k, v in seen.items() if "hunter" in v or url in v]
    assert len(listed(url)) == 1  # the option, not the variable, named the history


def test_two_replays_finishing_in_the_same_second_are_two_runs(history_url, golden, monkeypatch):
    """Against one server within one second, two replays write the same document but for its
    run id: two runs, not one."""
    from datetime import datetime, timezone

    class Frozen(datetime):
        @classmethod
        def now(cls, tz=None):
            return datetime(2026, 11, 30, 12, 0, 0, tzinfo=timezone.utc)

    monkeypatch.setattr("replay.golden.fingerprint.datetime", Frozen)
    with StubServer(StubConfig(extra_server_info={"version": "0.5.1"})) as stub:
        for _ in range(2):
            res = cli("--history", history_url, "replay", str(golden), "--server", stub.url, "-q")
            assert res.exit_code == 0, res.output
    runs = listed(history_url)
    assert len(runs) == 2 and len({r["run_id"] for r in runs}) == 2


@pytest.fixture(scope="module")
def same_name_goldens(tmp_path_factory, golden) -> tuple[Path, Path]:
    """a/t.zarr and b/t.zarr: one name, two contents (b has one more conversation)."""
    d = tmp_path_factory.mktemp("twins")
    (d / "a").mkdir()
    (d / "b").mkdir()
    import shutil

    shutil.copytree(golden, d / "a" / "t.zarr")
    (d / "b.toml").write_text(SCENARIO.replace("groups = 2", "groups = 3"))
    with StubServer(StubConfig(radix=False)) as stub:
        res = cli("record", "--server", stub.url, "--scenario", str(d / "b.toml"),
                  "--out", str(d / "b" / "t.zarr"), "--quiet")
    assert res.exit_code == 0, res.output
    return d / "a" / "t.zarr", d / "b" / "t.zarr"


def test_a_golden_directory_selects_its_own_runs_and_a_shared_name_is_refused(
        history_url, same_name_goldens, monkeypatch):
    a, b = same_name_goldens
    monkeypatch.chdir(a.parent.parent)
    for g in ("a/t.zarr", "b/t.zarr", "b/t.zarr"):
        assert replay(Path(g), "0.5.1", history=history_url).exit_code == 0
    mine = json.loads(cli("history", "show", "a/t.zarr", "--db", history_url, "--json").output)
    assert mine["runs"] == 1 and mine["golden_keys"] == [content_checksum(read_golden(a))]
    assert len(listed(history_url, "--golden", "b/t.zarr")) == 2
    res = cli("history", "show", "t.zarr", "--db", history_url)
    assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1
    assert "'t.zarr' matches 2 goldens" in res.output
    for digest in (content_checksum(read_golden(a)), content_checksum(read_golden(b))):
        assert digest[:12] in res.output


@pytest.mark.parametrize("args, env, named", [
    (["--history", "", "scenarios"], {}, "--history is empty"),
    (["scenarios"], {HISTORY_ENV: ""}, "GOLDEN_HISTORY is empty"),
    (["history", "--db", ""], {}, "--db is empty"),
    (["history", "--db", "  "], {}, "--db is empty"),
])
def test_an_empty_history_location_is_a_usage_error(tmp_path, monkeypatch, args, env, named):
    """An unset CI secret is a mistake to report, not a history to skip or a default file."""
    monkeypatch.chdir(tmp_path)
    res = cli(*args, env=env)
    assert res.exit_code == 2 and res.output.startswith("error: ") and named in res.output
    assert len(res.output.strip().splitlines()) == 1
    assert not (tmp_path / "golden-history.sqlite").exists()


@pytest.mark.parametrize("url, why", [
    ("postgresql://ci@127.0.0.1:99999/golden", "port 99999"),
    ("postgresql://ci@127.0.0.1:abc/golden", "is its port a number"),
    ("mysql://ci@db/golden", "unsupported history URL"),
])
def test_a_bad_history_url_is_a_usage_error_not_an_unexpected_one(url, why):
    res = cli("history", "--db", url)
    assert res.exit_code == 2 and why in res.output and "unexpected" not in res.output


def test_no_form_of_a_password_in_the_history_url_is_ever_printed(golden, tmp_path):
    report = tmp_path / "r.json"
    url = (f"postgresql://golden:hunter1@127.0.0.1:{free_port()}/none?password=hunter2"
           "&sslpassword=hunter3&passfile=/home/ci/.hunter4")
    res = replay(golden, "0.5.1", "--report", str(report), history=url)
    assert res.exit_code == 2 and json.loads(report.read_text())["verdict"] == "pass"
    [line] = [x for x in res.output.splitlines() if x.startswith("error:")]
    assert "127.0.0.1" in line and "hunter" not in res.output


def test_the_page_shows_the_history_location_without_its_secrets(postgres, tmp_path):
    url = postgres.new_database() + "?password=hunter2&sslpassword=hunter3"
    cli("history", "add", str(write(run_report(), tmp_path / "a.json")), "--db", url)
    res = cli("history", "page", "--out", str(tmp_path / "site"), "--db", url)
    assert res.exit_code == 0, res.output
    page = (tmp_path / "site" / "index.html").read_text()
    assert "hunter" not in page and "password=&lt;redacted&gt;" in page


def test_update_feeds_the_history_without_a_report_dir(history_url, golden, tmp_path):
    import shutil

    shutil.copytree(golden, tmp_path / "goldens" / "s.zarr")
    with StubServer(StubConfig(radix=False, extra_server_info={"version": "0.5.1"})) as stub:
        res = cli("--history", history_url, "update", str(tmp_path / "goldens"), "--server",
                  stub.url, "--quiet")
    assert res.exit_code == 0, res.output
    assert [r["golden"] for r in listed(history_url)] == [str(tmp_path / "goldens" / "s.zarr")]


def test_rendering_someone_s_report_adds_no_run(history_url, tmp_path):
    report = write(run_report(), tmp_path / "a.json")
    cli("history", "add", str(write(run_report(hour=1), tmp_path / "b.json")), "--db", history_url)
    res = cli("--history", history_url, "report", str(report), "-o", str(tmp_path / "r.html"))
    assert res.exit_code == 0 and (tmp_path / "r.html").exists()
    assert len(listed(history_url)) == 1


def test_a_reader_that_closed_the_pipe_ends_the_list_of_runs_quietly_with_exit_0(tmp_path):
    db = str(tmp_path / "h.sqlite")
    reports = [write(run_report(hour=h, golden_sha256=f"{h:064x}"), tmp_path / f"r{h}.json")
               for h in range(3)]
    assert cli("history", "add", *map(str, reports), "--db", db).exit_code == 0
    res = into_closed_pipe("history", "--db", db)
    assert (res.returncode, res.stderr) == (0, "")
