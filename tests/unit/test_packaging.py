"""What the distribution installs: every package folder of the source tree, the CLI under its own
import name `golden_cli` (never a top-level `cli` that another distribution could shadow)."""

import tomllib

from tests.support import paths


def _declared() -> list[str]:
    project = tomllib.loads((paths.REPO / "pyproject.toml").read_text())
    return project["tool"]["setuptools"]["packages"]


def test_every_replay_package_folder_is_installed():
    folders = sorted(".".join(p.parent.relative_to(paths.REPO).parts)
                     for p in (paths.REPO / "replay").rglob("__init__.py"))
    assert sorted(n for n in _declared() if n.startswith("replay")) == folders


def test_the_cli_installs_as_golden_cli_not_cli():
    project = tomllib.loads((paths.REPO / "pyproject.toml").read_text())
    assert project["tool"]["setuptools"]["package-dir"] == {"golden_cli": "cli"}
    assert "cli" not in _declared()
    assert project["project"]["scripts"]["golden"] == "golden_cli.entry:main"
