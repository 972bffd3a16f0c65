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


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "e2e: a real engine (llama.cpp, SGLang, vLLM): tests/e2e/; `-m 'not e2e'` runs "
        "the fast kinds (unit, integration) alone")


def pytest_collection_modifyitems(config, items):
    """Everything under tests/e2e/ is marked `e2e`, so no e2e test can forget its marker."""
    for item in items:
        if "e2e" in item.path.relative_to(config.rootpath).parts[:2]:
            item.add_marker(pytest.mark.e2e)
