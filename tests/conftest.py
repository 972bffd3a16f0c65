"""Shared test settings."""

import pytest


@pytest.fixture(autouse=True, scope="session")
def one_torch_thread():
    """In-process engines run one torch thread, as `python -m replay.engine` does on CPU: on a
    small shared machine, intra-op threads slow the engine's many small ops down severalfold."""
    try:
        import torch
    except ImportError:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


class FailuresAsTheyHappen:
    """One `FAILED <test> (<phase>)` line the moment a test fails, not only in the summary at the
    end: a CI log cut off by a time limit, or read from its first lines, still names them."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        terminal = self.config.pluginmanager.get_plugin("terminalreporter")
        if report.failed and terminal is not None:
            terminal.write("\n")  # the progress characters' line stays open in -q mode
            terminal.write_line(f"FAILED {report.nodeid} ({report.when})")


def pytest_configure(config):
    config.pluginmanager.register(FailuresAsTheyHappen(config), "golden-failures-as-they-happen")
    config.addinivalue_line(
        "markers", "e2e: a real engine (llama.cpp, SGLang, vLLM): tests/e2e/; `-m 'not e2e'` runs "
        "the fast kinds (unit, integration) alone")
    config.addinivalue_line(
        "markers", "xdist_group(name): tests that run on one worker under `pytest -n N --dist "
        "loadgroup` (pytest-xdist registers it too)")


# The e2e kinds whose tests share session fixtures: pd/ replays the goldens sglang_cpu/ records
# (tests/e2e/conftest.py), so both go to one worker when the suite runs on several
# (`-n N --dist loadgroup`, as scripts/test.sh runs it) and those goldens are recorded once.
E2E_GROUP = {"pd": "sglang_cpu"}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Everything under tests/e2e/ is marked `e2e`, so no e2e test can forget its marker. Each e2e
    kind is one `xdist_group` (its servers and session fixtures stay on one worker), and so is
    each integration module (its module fixtures are made once). First of its kind: xdist's own
    hook names each test's group from these marks, and a mark made after it groups nothing
    (until 2026-12-05 every module fixture of an e2e kind was made once per worker)."""
    for item in items:
        parts = item.path.relative_to(config.rootpath).parts
        if "e2e" in parts[:2]:
            item.add_marker(pytest.mark.e2e)
            kind = parts[2] if len(parts) > 3 else "e2e"
            item.add_marker(pytest.mark.xdist_group(E2E_GROUP.get(kind, kind)))
        elif "integration" in parts[:2]:
            item.add_marker(pytest.mark.xdist_group(item.path.stem))
