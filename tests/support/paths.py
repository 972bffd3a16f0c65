"""Where the tests find the repository, its committed goldens and the captured test data,
whichever folder (unit/, integration/, e2e/) a test lives in."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data"
GOLDENS = REPO / "goldens"
