"""No two modules of trainbench import each other, directly or through others: each module can be read, tested
and loaded with only what it imports below it (`import trainbench.tracking` loads no Hydra and no config).

What counts as an import of module A by module B (read with ast from src/trainbench/**/*.py):
- every `import trainbench.x` / `from trainbench.x import y` / relative import in B, at module level AND inside
  functions and methods: an import deferred into a function still makes B's code depend on A, so a cycle
  through it is a cycle in the design (a lazy import only hides it from the interpreter);
- `from trainbench.pkg import name` imports trainbench.pkg.name where that is a module, else trainbench.pkg;
  the parent packages Python initialises on the way are not counted (a package that re-exports its modules
  would otherwise tie each of them to every other).

What does not count:
- imports under `if TYPE_CHECKING:`: type-only, never executed.

An import by name counts when its name is written in the code: `importlib.import_module("trainbench.x")` and
`__import__("trainbench.x")` tie B to trainbench.x as a plain import does. A name read from data (the adapter a
framework's YAML names, loaded by trainbench.frameworks.load) is the plug-in design and cannot be seen here.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from conftest import ROOT

PACKAGE = ROOT / "src" / "trainbench"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def named_import(call: ast.Call) -> str | None:
    """The module a call imports by a name written in the code (`importlib.import_module("a.b")`,
    `import_module("a.b")`, `__import__("a.b")`), else None."""
    function = call.func
    called = function.attr if isinstance(function, ast.Attribute) else getattr(function, "id", None)
    if called not in ("import_module", "__import__") or not call.args:
        return None
    name = call.args[0]
    return name.value if isinstance(name, ast.Constant) and isinstance(name.value, str) else None


def imported_modules(path: Path, modules: set[str]) -> dict[str, int]:
    """The trainbench modules `path` imports, each with the line of its first import there."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]

    def known(target: str) -> str | None:
        while target and target not in modules:
            target = target.rpartition(".")[0]
        return target or None

    found: dict[str, int] = {}

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and is_type_checking(child):
                for branch in child.orelse:  # `else:` of TYPE_CHECKING runs
                    visit_statement(branch)
                continue
            visit_statement(child)

    def visit_statement(child: ast.AST) -> None:
        targets: list[str | None] = []
        line = 0
        if isinstance(child, ast.Import):
            targets, line = [known(alias.name) for alias in child.names], child.lineno
        elif isinstance(child, ast.Call) and named_import(child) is not None:
            targets, line = [known(named_import(child) or "")], child.lineno
        elif isinstance(child, ast.ImportFrom):
            base = child.module or ""
            if child.level:
                anchor = package.split(".")[: len(package.split(".")) - child.level + 1]
                base = ".".join(anchor + ([child.module] if child.module else []))
            targets, line = [known(f"{base}.{alias.name}") for alias in child.names], child.lineno
        for target in targets:
            if target is not None and target != name:
                found.setdefault(target, line)
        visit(child)

    visit(ast.parse(path.read_text(), str(path)))
    return found


def import_graph() -> dict[str, dict[str, int]]:
    paths = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
    return {name: imported_modules(path, set(paths)) for name, path in paths.items()}


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            child = next(edges, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(graph[child])))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
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
                    found.append(sorted(component))
    return found


def describe(component: list[str], graph: dict[str, dict[str, int]]) -> str:
    lines = [f"cycle among {', '.join(component)}:"]
    for module in component:
        for target, line in sorted(graph[module].items()):
            if target in component:
                lines.append(f"  {module} (line {line}) imports {target}")
    return "\n".join(lines)


def test_no_module_imports_one_that_imports_it_back() -> None:
    graph = import_graph()
    found = cycles(graph)
    assert not found, "\n".join(describe(component, graph) for component in found)


def test_the_walk_sees_lazy_imports_and_skips_type_only_ones() -> None:
    """The rule above, on the real package: the worker's lazy import of the ranks is seen; the Framework
    type-only import of the config schema is not."""
    graph = import_graph()
    assert "trainbench.runner.ranks" in graph["trainbench.runner.worker"]  # inside main()
    assert "trainbench.config.schema" not in graph["trainbench.frameworks.base"]  # under TYPE_CHECKING
    assert cycles({"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}, "d": {"a": 1}}) == [["a", "b", "c"]]


def test_an_import_by_a_written_name_counts() -> None:
    """`importlib.import_module("trainbench.x")` names trainbench.x as a plain import does; a name read from data
    does not."""

    def named(code: str) -> str | None:
        call = ast.parse(code).body[0].value  # type: ignore[attr-defined]
        return named_import(call)

    assert named("importlib.import_module('trainbench.config.schema')") == "trainbench.config.schema"
    assert named("import_module('trainbench.tasks.train')") == "trainbench.tasks.train"
    assert named("__import__('trainbench.frameworks')") == "trainbench.frameworks"
    assert named("importlib.import_module(cell.framework.adapter)") is None


def test_importing_the_config_loads_no_framework_and_no_task() -> None:
    """A tool that reads a cell's config (the report, the references, a stored run's setting) loads only the
    config: no framework's package, no adapter, no task module, no deep-learning framework."""
    shown = (
        "import sys, trainbench.config; "
        "print('\\n'.join(m for m in sys.modules if m.startswith(('trainbench.frameworks', 'trainbench.tasks'))"
        " or m.split('.')[0] in ('torch', 'tensorflow', 'keras', 'jax', 'mlx')))"
    )
    loaded = subprocess.run([sys.executable, "-c", shown], cwd=PACKAGE.parent, capture_output=True, text=True)
    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout.split() == []


def test_every_schema_a_choice_names_is_registered_by_the_plugins() -> None:
    """config.plugins registers the shipped frameworks and tasks by plain imports: a package or task module left
    out of frameworks/shipped.py or tasks/shipped.py is named here, not met as Hydra's error in a user's sweep."""
    import re

    from trainbench.config.plugins import SCHEMAS
    from trainbench.locations import CONF_DIR

    named = {
        (group, kind)
        for path in CONF_DIR.glob("*/*.yaml")
        for group, kind in re.findall(r"/schema/(\w+)/(\w+)@", path.read_text())
    }
    assert {group for group, _ in named} >= {"framework", "task"}
    missing = sorted(f"schema/{group}/{kind}" for group, kind in named if kind not in SCHEMAS.get(group, {}))
    assert not missing, f"named in conf/ but registered by no module config.plugins imports: {missing}"
