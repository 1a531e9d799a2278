"""Layering of the specviz package.

- The engine packages (retrieval, index, bench, glide, heads, models) never import the command line:
  importing them leaves `specviz.cli` out of sys.modules, and no module outside specviz/cli/
  (but specviz/__main__.py) names it in an import.
- No import circle among specviz's modules. The graph is built from the AST of every module
  under specviz/: the imports that run when a module is imported (module level, including
  those under `if` / `try` / class bodies there). Imports inside functions run later, when
  the function is called, and are excluded. `from X import a, b` is an edge to X.a / X.b
  where those are modules and to X where one of them is not.
- No upward import: no module below the front ends (engine core, models, drafters, index,
  retrieval, glide, viz) imports a front end (specviz.cli, specviz.ui, specviz.bench), at
  module level or in a function; the UI reads the bench only through `specviz.bench`'s
  public names (load_results, summary_markdown, results_figures), never its submodules.
- No front end names a drafter (see test_no_front_end_names_a_drafter).
"""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path
from typing import Sequence

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "specviz"
ENGINE = ("specviz.retrieval", "specviz.index", "specviz.bench", "specviz.glide", "specviz.heads", "specviz.models")


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _is_package(name: str, modules: dict[str, Path]) -> bool:
    return modules[name].name == "__init__.py"


def _module_level_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    found: list[ast.Import | ast.ImportFrom] = []

    def walk(nodes: list[ast.stmt]) -> None:
        for node in nodes:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                found.append(node)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue                                    # runs when called, not on import
            else:                                           # if / try / with / class bodies
                for child in ast.iter_child_nodes(node):
                    if isinstance(child, ast.stmt):
                        walk([child])
                    elif isinstance(child, ast.ExceptHandler):
                        walk(child.body)
    walk(tree.body)
    return found


def _targets(name: str, node: ast.Import | ast.ImportFrom, modules: dict[str, Path]) -> set[str]:
    """The specviz modules an import statement in module `name` loads."""
    if isinstance(node, ast.Import):
        return {a.name for a in node.names if a.name in modules}
    if node.level:
        package = name if _is_package(name, modules) else name.rpartition(".")[0]
        for _ in range(node.level - 1):
            package = package.rpartition(".")[0]
        base = f"{package}.{node.module}" if node.module else package
    else:
        base = node.module or ""
    if base not in modules:
        return set()
    subs = {f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in modules}
    plain = [a for a in node.names if f"{base}.{a.name}" not in modules]
    return subs | ({base} if plain else set())


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        edges: set[str] = set()
        for node in _module_level_imports(tree):
            edges |= _targets(name, node, modules)
        graph[name] = edges - {name}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}                           # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        found = visit(node) if node not in state else None
        if found:
            return found
    return None


def test_import_graph_sees_the_imports() -> None:
    graph = import_graph()
    assert "specviz.cli.generate" in graph["specviz.cli"]
    assert "specviz.errors" in graph["specviz.cli.errors"]
    assert "specviz.bench.metrics" in graph["specviz.bench"]


def test_no_import_circle() -> None:
    cycle = _cycle(import_graph())
    assert cycle is None, "import circle: " + " -> ".join(cycle or [])


def test_a_cycle_would_be_found() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_only_the_cli_and_main_import_the_cli() -> None:
    """Module-level or not: no import of specviz.cli outside specviz/cli/ and __main__.py."""
    modules = _modules()
    offenders = []
    for name, path in modules.items():
        if name == "specviz.cli" or name.startswith("specviz.cli.") or name == "specviz.__main__":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                targets = _targets(name, node, modules)
                if any(t == "specviz.cli" or t.startswith("specviz.cli.") for t in targets):
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not offenders, offenders


def test_engine_packages_do_not_load_the_cli() -> None:
    code = (f"import sys\nimport {', '.join(ENGINE)}\n"
            "print(sorted(m for m in sys.modules if m == 'specviz.cli' or m.startswith('specviz.cli.')))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", done.stdout


FRONT_ENDS = ("specviz/cli", "specviz/ui", "specviz/bench")


def _front_end_files() -> list[Path]:
    return [p for d in FRONT_ENDS for p in sorted((ROOT / d).rglob("*.py"))] + [ROOT / "app.py"]


def _drafter_literals(path: Path, names: set[str]) -> list[str]:
    """String literals in `path` that are a drafter's name, or a list of names ("a,b"; prose,
    which has spaces, may mention drafters)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and " " not in node.value.strip():
            if set(node.value.strip().split(",")) & names:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.value!r}")
    return found


def test_no_front_end_names_a_drafter() -> None:
    """The CLI, the UI and the bench loop over the registry's specs (order, family, flags such
    as is_baseline and needs_reference): no string literal there is a registered drafter's name."""
    from specviz.drafters import REGISTRY

    names = set(REGISTRY)
    offenders = [hit for path in _front_end_files() for hit in _drafter_literals(path, names)]
    assert not offenders, offenders


def test_a_named_drafter_would_be_found() -> None:
    probe = ROOT / "tests" / "_probe_front_end.py"       # under ROOT: reported relative to it
    probe.write_text('X = "ngram_trie"\nY = "a,oracle"\nZ = "ngram_trie[n=3]"\n', encoding="utf-8")
    try:
        hits = _drafter_literals(probe, {"ngram_trie", "oracle"})
    finally:
        probe.unlink()
    assert [h.split(" ")[0].rsplit(":", 1)[1] for h in hits] == ["1", "2"]


FRONT_END_PACKAGES = ("specviz.cli", "specviz.ui", "specviz.bench")


def _in(name: str, packages: Sequence[str]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in packages)


def _all_imports(modules: dict[str, Path]) -> list[tuple[str, int, str]]:
    """(module, line, imported specviz module) for every import, in functions too."""
    out = []
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                out += [(name, node.lineno, t) for t in _targets(name, node, modules)]
    return out


def test_no_upward_import_into_a_front_end() -> None:
    """index/, retrieval/, models.py, engine.py, the drafters... never import the CLI, the UI or
    the bench (only specviz/__main__.py, the entry point, may)."""
    modules = _modules()
    offenders = [f"{name}:{line} imports {target}" for name, line, target in _all_imports(modules)
                 if not _in(name, FRONT_END_PACKAGES) and name != "specviz.__main__"
                 and _in(target, FRONT_END_PACKAGES)]
    assert not offenders, offenders
    lower = {"specviz.index", "specviz.retrieval", "specviz.models", "specviz.engine"}
    assert lower <= set(modules), "a layer named here moved: update the test"


def test_the_ui_reads_the_bench_through_its_public_api() -> None:
    modules = _modules()
    offenders = [f"{name}:{line} imports {target}" for name, line, target in _all_imports(modules)
                 if _in(name, ("specviz.ui",)) and target.startswith("specviz.bench.")]
    assert not offenders, offenders
    import specviz.bench as bench
    assert {"load_results", "summary_markdown", "results_figures"} <= set(bench.__all__)
