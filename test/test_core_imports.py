"""Imports point one way: the core (timely_llm_ros/core) imports no engine, evaluation or ROS module and neither rclpy,
torch nor transformers, and no module of the package imports itself back through others (no import cycle)."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "timely_llm_ros"
FORBIDDEN_IN_CORE = ("timely_llm_ros.engine", "timely_llm_ros.evaluation", "timely_llm_ros.ros", "rclpy", "torch",
                     "transformers", "vllm")


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path) -> set[str]:
    """Every module a file imports, wherever the import statement stands (functions included), relative ones
    resolved; ``from package import name`` counts the submodule package.name when one exists."""
    own = module_name(path)
    package = own if path.name == "__init__.py" else own.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                origin = ".".join(base + ([node.module] if node.module else []))
            else:
                origin = node.module or ""
            found.add(origin)
            for alias in node.names:
                sub = f"{origin}.{alias.name}"
                if (REPO / Path(*sub.split("."))).with_suffix(".py").exists() or (
                        REPO / Path(*sub.split("."))).is_dir():
                    found.add(sub)
    return found


def forbidden(name: str) -> bool:
    return any(name == f or name.startswith(f + ".") for f in FORBIDDEN_IN_CORE)


def test_no_core_module_imports_an_engine_model_ros_or_torch_module():
    offending = {module_name(p): sorted(n for n in imported_modules(p) if forbidden(n))
                 for p in sorted((PACKAGE / "core").rglob("*.py"))}
    assert {m: names for m, names in offending.items() if names} == {}


def test_importing_every_core_module_loads_no_engine_model_ros_or_torch_module():
    modules = [module_name(p) for p in sorted((PACKAGE / "core").rglob("*.py"))]
    code = ("import importlib, sys\n"
            f"for name in {modules!r}:\n"
            "    importlib.import_module(name)\n"
            f"forbidden = {FORBIDDEN_IN_CORE!r}\n"
            "bad = sorted(m for m in sys.modules if any(m == f or m.startswith(f + '.') for f in forbidden))\n"
            "print(bad)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def import_graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports (packages as their __init__), for every module of the package."""
    files = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = {}
    for name, path in files.items():
        graph[name] = {m for m in imported_modules(path) if m in files and m != name
                       and not name.startswith(m + ".")}   # a module's own parent packages load before it anyway
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_module_of_the_package_imports_itself_back_through_others():
    assert cycles(import_graph()) == []
