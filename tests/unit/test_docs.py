"""The docs stand on their own: no page cites a path outside the repository (a workplace note,
another checkout), which a reader of the repository cannot open."""

import re

import pytest

from tests.support import paths

PAGES = sorted([paths.REPO / "README.md", *(paths.REPO / "docs").glob("*.md")])
OUTSIDE = re.compile(r"\.\./shared\b|/work/|(?<![\w./-])shared/[\w-]+\.md")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_no_page_cites_a_path_outside_the_repository(page):
    assert [m.group(0) for m in OUTSIDE.finditer(page.read_text())] == []


def test_the_check_sees_such_a_path():
    assert OUTSIDE.search("see ../shared/real-engines.md") and OUTSIDE.search("at /work/main")
    assert OUTSIDE.search("the note `shared/portable-math.md`")
    assert not OUTSIDE.search("docs/report.md, replay/server/shared_thing.py")


def test_the_readme_names_the_pytest_plugin_the_package_ships():
    """The plugin is how a project that runs pytest uses the tool: the README says it exists."""
    import tomllib
    plugins = tomllib.loads((paths.REPO / "pyproject.toml").read_text())["project"][
        "entry-points"]["pytest11"]
    readme = (paths.REPO / "README.md").read_text()
    assert "pytest plugin" in readme and "(docs/ci.md#pytest)" in readme
    assert all(f"`{name}`" in readme for name in plugins)
