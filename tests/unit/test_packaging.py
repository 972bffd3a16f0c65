"""What the distribution installs: every package folder of the source tree under the folder's
own name, the CLI as `cli` (the folder cli/), and no other distribution's `cli` in its place."""

import tomllib

from tests.support import paths


def _declared() -> list[str]:
    project = tomllib.loads((paths.REPO / "pyproject.toml").read_text())
    return project["tool"]["setuptools"]["packages"]


def test_every_replay_package_folder_is_installed():
    folders = sorted(".".join(p.parent.relative_to(paths.REPO).parts)
                     for p in (paths.REPO / "replay").rglob("__init__.py"))
    assert sorted(n for n in _declared() if n.startswith("replay")) == folders


def test_the_cli_installs_under_its_folders_name():
    project = tomllib.loads((paths.REPO / "pyproject.toml").read_text())
    assert "package-dir" not in project["tool"]["setuptools"]  # every import name is its folder
    assert "cli" in _declared()
    assert project["project"]["scripts"]["golden"] == "cli.entry:main"
