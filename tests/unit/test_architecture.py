"""The package arrows of docs/architecture.md, as data: every import between the packages of
`replay/` follows the table there, and the library never imports the CLI."""

import ast
import re

from tests.support import paths


def _allowed() -> dict[str, set[str]]:
    text = (paths.REPO / "docs" / "architecture.md").read_text()
    table = text.split("## The allowed arrows", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| ([a-z_]+) \| ([a-z_, ]*)\|$", table, flags=re.M)
    return {pkg: {n.strip() for n in deps.split(",") if n.strip()}
            for pkg, deps in rows if pkg != "package"}


def _imports() -> list[tuple[str, str, str]]:
    """(importing package, imported top-level name, file) for every absolute import."""
    found = []
    for f in (paths.REPO / "replay").rglob("*.py"):
        parts = f.relative_to(paths.REPO).with_suffix("").parts
        pkg = parts[1] if len(parts) > 2 else ""
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            found += [(pkg, n, str(f.relative_to(paths.REPO))) for n in names]
    return found


def test_the_table_names_every_package():
    folders = {p.parent.name for p in (paths.REPO / "replay").glob("*/__init__.py")}
    assert set(_allowed()) == folders


def test_every_import_between_packages_is_an_allowed_arrow():
    allowed = _allowed()
    wrong = [(f, n) for pkg, n, f in _imports()
             if pkg and n.startswith("replay.") and n.split(".")[1] != pkg
             and n.split(".")[1] not in allowed[pkg]]
    assert wrong == []


def test_golden_server_and_judge_do_not_import_each_other():
    allowed = _allowed()
    for a in ("golden", "server", "judge"):
        assert not allowed[a] & {"golden", "server", "judge"}


def test_the_library_never_imports_the_cli():
    assert [f for _, n, f in _imports() if n.split(".")[0] == "cli"] == []
