"""docs/architecture.md as data, held to the code: its packages table names every module of the
tree and no other, every import between the packages of `replay/` follows its arrows table, the
library never imports the CLI, there are no import circles and no module over 400 lines."""

import ast
import functools
import re
from pathlib import Path


from tests.support import paths

DOC = paths.REPO / "docs" / "architecture.md"
MAX_LINES = 400


def _section(title: str) -> str:
    return DOC.read_text().split(f"## {title}", 1)[1].split("\n## ", 1)[0]


def _allowed() -> dict[str, set[str]]:
    rows = re.findall(r"^\| ([a-z_]+) \| ([a-z_, ]*)\|$", _section("The allowed arrows"), flags=re.M)
    return {pkg: {n.strip() for n in deps.split(",") if n.strip()}
            for pkg, deps in rows if pkg != "package"}


def _documented_modules() -> dict[str, set[str]]:
    """package folder -> the modules its row of the packages table names (`sub/` a subpackage)."""
    rows = re.findall(r"^\| `([a-z_/]+)` \| ([^|]*) \|", _section("The packages"), flags=re.M)
    return {pkg: {m.strip().strip("`") for m in mods.split(",") if m.strip()} for pkg, mods in rows}


def _tree_modules() -> dict[str, set[str]]:
    """package folder -> its modules (every .py but __init__) and subpackages (`name/`)."""
    found = {}
    for init in [*(paths.REPO / "replay").rglob("__init__.py"), paths.REPO / "cli" / "__init__.py"]:
        folder = init.parent
        pkg = folder.relative_to(paths.REPO).as_posix()
        if pkg == "replay":
            continue
        found[pkg] = ({f.stem for f in folder.glob("*.py") if f.name != "__init__.py"}
                      | {f"{d.name}/" for d in folder.iterdir() if (d / "__init__.py").is_file()})
    return found


@functools.cache
def _sources() -> dict[str, tuple[Path, ast.Module]]:
    """module name -> (file, parsed) for every module of replay/ and cli/."""
    found = {}
    for f in [*(paths.REPO / "replay").rglob("*.py"), *(paths.REPO / "cli").rglob("*.py")]:
        name = ".".join(f.relative_to(paths.REPO).with_suffix("").parts).removesuffix(".__init__")
        found[name] = (f, ast.parse(f.read_text()))
    return found


def _imports() -> list[tuple[str, str, str]]:
    """(importing package of replay/, imported name, file) for every absolute import."""
    found = []
    for module, (f, tree) in _sources().items():
        parts = module.split(".")
        if parts[0] != "replay":
            continue
        pkg = parts[1] if len(parts) > 2 or f.name == "__init__.py" and len(parts) > 1 else ""
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            found += [(pkg, n, str(f.relative_to(paths.REPO))) for n in names]
    return found


def test_the_arrows_table_names_every_package():
    folders = {p.parent.name for p in (paths.REPO / "replay").glob("*/__init__.py")}
    assert set(_allowed()) == folders


def test_the_packages_table_names_every_module_of_the_tree_and_no_other():
    documented, tree = _documented_modules(), _tree_modules()
    assert sorted(documented) == sorted(tree), "a package missing from (or gone but still in) " \
        "docs/architecture.md's packages table"
    wrong = {pkg: {"undocumented": sorted(tree[pkg] - documented[pkg]),
                   "not in the tree": sorted(documented[pkg] - tree[pkg])}
             for pkg in tree if tree[pkg] != documented[pkg]}
    assert wrong == {}


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


def test_every_optional_capability_is_named_on_the_page():
    protocols = {n.name for _, tree in _sources().values() for n in tree.body
                 if isinstance(n, ast.ClassDef) and n.name.startswith("Supports")}
    named = set(re.findall(r"`(Supports[A-Za-z]+)`", DOC.read_text())) - {"SupportsX"}  # the rule
    assert protocols == named


def _graph() -> dict[str, set[str]]:
    """module -> the modules of replay/ and cli/ it imports (lazy imports inside functions too;
    a module's own package is not an edge)."""
    modules = _sources()

    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, (f, tree) in modules.items():
        pkg = module if f.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = pkg.split(".")
                    base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
                names = [f"{base}.{a.name}" for a in node.names] + [base]
            for name in names:
                target = resolve(name)
                if target and target not in (module, pkg):
                    graph[module].add(target)
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        circles.append(sorted(component))
    return circles


def test_no_modules_import_each_other_in_a_circle():
    assert _circles(_graph()) == []


def test_the_circle_check_sees_a_circle():
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_module_is_over_400_lines():
    over = {str(f.relative_to(paths.REPO)): n for f, _ in _sources().values()
            if (n := len(f.read_text().splitlines())) > MAX_LINES}
    assert over == {}, "split these modules"
