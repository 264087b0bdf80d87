"""The import graph of the project's packages: no cycle between packages, no upward edge.

Layers, lowest first (README, docs/architecture.md): a package may import only packages below it.
Parsed with the standard library's ``ast`` (nothing is imported), so the check covers every module,
including imports inside functions.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYERS: tuple[str, ...] = ("projection", "bench", "tools", "prompts", "agent", "evals", "projtune")
"""Lowest first: projection (engine) < bench (measured mode) < tools (typed API) < prompts < agent < evals < projtune (CLI)."""


def _imports(path: Path, module: str) -> set[str]:
    """Top-level project packages that one module imports (absolute and relative imports)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")[: -node.level]
                names = [".".join(base + ([node.module] if node.module else []))]
            else:
                names = [node.module or ""]
        else:
            continue
        found.update(n.split(".")[0] for n in names if n.split(".")[0] in LAYERS)
    return found


def _edges() -> dict[tuple[str, str], list[str]]:
    edges: dict[tuple[str, str], list[str]] = {}
    for package in LAYERS:
        for path in sorted((ROOT / package).rglob("*.py")):
            module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            for target in _imports(path, module) - {package}:
                edges.setdefault((package, target), []).append(module)
    return edges


def test_every_layer_exists() -> None:
    assert all((ROOT / p / "__init__.py").is_file() for p in LAYERS)


def test_no_upward_import() -> None:
    rank = {p: i for i, p in enumerate(LAYERS)}
    upward = {f"{a} -> {b}": mods for (a, b), mods in _edges().items() if rank[b] > rank[a]}
    assert upward == {}, f"upward imports (a lower layer imports a higher one): {upward}"


def test_no_import_cycle_between_packages() -> None:
    graph: dict[str, set[str]] = {p: set() for p in LAYERS}
    for a, b in _edges():
        graph[a].add(b)

    def reachable(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for nxt in graph[todo.pop()] - seen:
                seen.add(nxt)
                todo.append(nxt)
        return seen

    cycles = sorted(f"{a} -> {b} -> ... -> {a}" for a in LAYERS for b in graph[a] if a in reachable(b))
    assert cycles == [], f"import cycles between packages: {cycles}"


def test_no_importlib_discovery_between_project_packages() -> None:
    """Project packages import each other directly, never through importlib (issue: hidden fallbacks)."""
    offenders = []
    for package in LAYERS:
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                        and node.func.attr == "import_module" and node.args
                        and isinstance(node.args[0], ast.Constant | ast.JoinedStr)):
                    text = ast.unparse(node.args[0])
                    if any(text.strip("'\"f").startswith(p) for p in LAYERS):
                        offenders.append(f"{path.relative_to(ROOT)}: {text}")
    assert offenders == [], offenders


def _module_graph() -> dict[str, set[str]]:
    """Module -> project modules it imports (any import statement, inside functions and TYPE_CHECKING too).

    ``from package import name`` counts as an import of ``package.name`` when that is a module.
    """
    modules = {".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p
               for package in LAYERS for p in sorted((ROOT / package).rglob("*.py"))}
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        targets: set[str] = set()
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    parts = module.split(".")
                    base = parts[: len(parts) - node.level + (1 if is_package else 0)]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                targets.add(source)
                targets.update(f"{source}.{alias.name}" for alias in node.names)
        graph[module] = {t for t in targets if t in modules and t != module
                         and not module.startswith(t + ".") and not (is_package and t.startswith(module + "."))}
    return graph


def test_no_import_cycle_between_modules() -> None:
    """No two project modules import each other, directly or through others (package __init__ re-exports aside)."""
    graph = _module_graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(node: str) -> None:          # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    assert cycles == [], f"module import cycles: {cycles}"
