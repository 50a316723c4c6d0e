"""The server's modules import one another without a circle (issue 44 §5): the assembly (app.py)
imports the route modules, which import what they share (state.py) and never the assembly. Every
import counts, at module level or inside a function or a TYPE_CHECKING block."""

from __future__ import annotations

import ast
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

SERVER = Path(__file__).resolve().parents[2] / "git_xet" / "server"


def _imports(path: Path) -> set[str]:
    """The sibling modules `path` imports (`from . import x`, `from .x import y`)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                found.add(node.module.split(".")[0])
            else:
                found.update(alias.name for alias in node.names)
    return found


def test_the_server_modules_import_one_another_without_a_circle() -> None:
    modules = {path.stem: path for path in SERVER.glob("*.py")}
    graph = {name: _imports(path) & modules.keys() for name, path in modules.items()}
    assert "state" in graph["grants"] and "cas_api" in graph["app"]  # the reading worked
    try:
        order = list(TopologicalSorter(graph).static_order())
    except CycleError as exc:
        raise AssertionError(f"import circle among server modules: {exc.args[1]}") from None
    assert order.index("state") < order.index("app")
