"""The import graph: daemon -> deploy -> tcl_core, one way, no loops (function-level imports included)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).parents[1]
PACKAGES = ("tcl_core", "deploy", "daemon")


def _imports() -> dict[str, set[str]]:
    """module -> our modules it imports anywhere in its file."""
    graph: dict[str, set[str]] = {}
    for package in PACKAGES:
        for path in (ROOT / package).glob("*.py"):
            module, found = f"{package}.{path.stem}", set()
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom) and node.module in PACKAGES:
                    found |= {f"{node.module}.{alias.name}" for alias in node.names}
                elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in PACKAGES:
                    found.add(node.module)
                elif isinstance(node, ast.Import):
                    found |= {a.name for a in node.names if a.name.split(".")[0] in PACKAGES}
            graph[module] = found - {module}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    found, state, stack = [], {}, []

    def visit(node: str) -> None:
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                found.append(stack[stack.index(nxt):] + [nxt])
            elif nxt in graph and nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node)
    return found


def test_no_module_imports_back_into_a_loop():
    graph = _imports()
    assert len(graph) > 30 and _cycles(graph) == []
    assert _cycles({"a": {"b"}, "b": {"a"}}) == [["a", "b", "a"]]  # the check itself finds a loop


def test_imports_flow_daemon_to_deploy_to_tcl_core_only():
    rank = {package: index for index, package in enumerate(PACKAGES)}
    upward = [(module, target) for module, targets in _imports().items() for target in targets
              if rank[target.split(".")[0]] > rank[module.split(".")[0]]]
    assert upward == []


def test_tvm_api_knows_tvm_not_our_method():
    assert _imports()["tcl_core.tvm_api"] == set()
