"""What the distribution installs: every package folder of the source tree under the folder's
own name, the CLI as `cli` (the folder cli/), and no other distribution's `cli` in its place."""

import subprocess
import sys
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


def test_the_cli_an_interpreter_imports_from_elsewhere_is_this_repositorys():
    """Started outside the repository (no working directory on sys.path), `import cli` still
    finds this cli/ folder: no other distribution's top-level `cli` shadows it."""
    done = subprocess.run([sys.executable, "-c", "import cli; print(cli.__file__)"],
                          capture_output=True, text=True, cwd="/", check=True)
    assert done.stdout.strip() == str(paths.REPO / "cli" / "__init__.py")
