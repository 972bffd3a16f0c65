"""`golden show | verify | scenarios` as a developer reads them in a pipe or a CI log."""

from __future__ import annotations

import pytest

from tests.support import paths
from tests.support.closed_pipe import into_closed_pipe

COMMITTED = paths.GOLDENS / "single.zarr"


@pytest.mark.parametrize("args", [["scenarios"], ["show", str(COMMITTED)],
                                  ["show", str(COMMITTED), "--json"]])
def test_a_reader_that_closed_the_pipe_ends_the_listing_quietly_with_exit_0(args):
    res = into_closed_pipe(*args)
    assert (res.returncode, res.stderr) == (0, "")
