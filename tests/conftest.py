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
