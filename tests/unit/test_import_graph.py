"""The package's rooms and the imports between them, read from the source with `ast` (nothing is
imported): no module-level import circle, and layers call only downward (docs/architecture.md):

    core, version.py  <-  platform  <-  storage  <-  client  <-  pipelines
                      <-  agent, server, commands  <-  cli.py, __main__.py, the package root

A circle makes a module's meaning depend on which of its members was imported first, and an
upward import pulls a whole layer into a process that needed the one below (the transfer agent
pays for every module it loads, eight times per command). A module outside every room (a loose
module at the package root) fails here until it is given one.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "git_xet"

# Room -> floor. A room may import from its own floor's other rooms only on the top floors
# (agent, server and commands call each other's helpers); elsewhere only from floors below.
FLOORS = {
    "core": 0,
    "version": 0,
    "platform": 1,
    "storage": 2,
    "client": 3,  # reads storage (its local and bucket backends), never the reverse
    "pipelines": 4,
    "agent": 5,
    "server": 5,
    "commands": 5,
    "cli": 6,
    "__main__": 6,
    "": 6,  # the package root: the public facade, whose names are imported lazily
}
SIDEWAYS_FLOORS = {5, 6}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _targets(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> list[str]:
    """The git_xet modules an import statement loads (for `from X import name`, X.name when that
    is a module of the package, else X)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names if alias.name.split(".")[0] == "git_xet"]
    if node.level:
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[: len(base) - node.level + 1]
        source = ".".join(base + ([node.module] if node.module else []))
    else:
        source = node.module or ""
    if source.split(".")[0] != "git_xet":
        return []
    found = []
    for alias in node.names:
        sub = f"{source}.{alias.name}"
        found.append(sub if _exists(sub) else source)
    return found


def _exists(module: str) -> bool:
    path = PACKAGE.parent.joinpath(*module.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _walk(node: ast.AST, module_level: bool, found: list[tuple[ast.Import | ast.ImportFrom, bool]]) -> None:
    """Every import statement under `node`, with whether it runs when the module is loaded
    (not inside a function); what only a type checker reads (`if TYPE_CHECKING:`) is skipped."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for other in child.orelse:
                _walk(other, module_level, found)
            continue
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            found.append((child, module_level))
        _walk(child, module_level and not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)), found)


def _imports() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(module -> what it imports when it is loaded, module -> everything it may import at run time,
    function-level imports included)."""
    at_load: dict[str, set[str]] = {}
    anywhere: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _module_name(path)
        statements: list[tuple[ast.Import | ast.ImportFrom, bool]] = []
        _walk(ast.parse(path.read_text(), str(path)), True, statements)
        at_load[module], anywhere[module] = set(), set()
        for statement, module_level in statements:
            targets = set(_targets(statement, module, path.name == "__init__.py")) - {module}
            anywhere[module] |= targets
            if module_level:
                at_load[module] |= targets
    return at_load, anywhere


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each strongly connected group of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return found


def test_the_walk_sees_the_package() -> None:
    at_load, anywhere = _imports()
    assert len(at_load) > 100
    assert "git_xet.core.errors" in at_load["git_xet.storage.errors"]
    assert "git_xet.pipelines.upload" in anywhere["git_xet.agent.session"] - at_load["git_xet.agent.session"]  # lazy


def test_no_import_circle() -> None:
    """Neither between modules loaded together (module-level imports) nor through a lazy import
    back into a module that imports the lazy one's module at load time."""
    at_load, anywhere = _imports()
    assert _circles(at_load) == [], "modules that import each other as they load"
    assert _circles(anywhere) == [], "a lazy import back into a module that imports its module: move what both need to a third"


def test_every_module_has_a_room_and_layers_call_only_downward() -> None:
    _at_load, anywhere = _imports()
    unplaced = sorted(m for m in anywhere if _room(m) not in FLOORS)
    assert unplaced == [], f"give each of {unplaced} a room (a package of its layer), and a line in docs/architecture.md"
    upward = []
    for module, targets in anywhere.items():
        floor = FLOORS[_room(module)]
        for target in targets:
            if _room(target) == _room(module) or (target == "git_xet" and module == "git_xet.__main__"):
                continue
            other = FLOORS.get(_room(target), 99)
            if other > floor or (other == floor and floor not in SIDEWAYS_FLOORS):
                upward.append(f"{module} -> {target}")
    assert sorted(upward) == [], "an import that runs upward: move what it needs down, or the importer up"
