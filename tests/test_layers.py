"""Layering of the specviz package, enforced by folder (docs/ARCHITECTURE.md draws it).

- LAYERS lists specviz's folders from the bottom up, one rung per entry. A module imports only its
  own folder and the rungs below it, at module level and inside functions alike (`layer_breaches`).
  Folders on one rung do not import each other. The edges come from the AST of every module under
  specviz/: `from X import a, b` is an edge to X.a / X.b where those are modules and to X where one
  of them is not; a sub-folder with its own rung (drafters/kit under drafters/) is its own folder.
- No import circle among the imports that run when a module is imported (module level, including
  those under `if` / `try` / class bodies there; imports inside functions run when called).
- Nothing below the front ends imports the CLI, the UI or the bench; only the CLI and __main__
  import the CLI; the UI reads the bench only through `specviz.bench`'s public names.
- No front end names a drafter: no drafter's name as a string literal, no import of a method's
  module (specviz.drafters.<method>); they go through the registry (specviz.drafters) and the kit.
- specviz/'s root holds only __init__, __main__, errors and old_paths: every other module lives in
  its layer's folder.
- The 0.9 module paths (specviz/old_paths.py MOVED) import, warn with a DeprecationWarning naming the
  new path, and give the very module at the new path; the public names (`from specviz import
  load_model, generate, ...`) import; a plugin written against the 0.9 paths still registers; and
  nothing in the repository (package, tests, scripts, benchmarks, examples) imports an old path.
"""
from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Sequence

from conftest import drafter_literals, shown_path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "specviz"
ENGINE = ("specviz.retrieval", "specviz.index", "specviz.bench", "specviz.netkit", "specviz.glide", "specviz.heads",
          "specviz.eagle", "specviz.mtp",
          "specviz.models", "specviz.core", "specviz.engine", "specviz.drafters", "specviz.analysis", "specviz.viz")

# The house, bottom rung first: a module imports its own folder and the rungs below, never above
# and never a neighbour on its own rung. "specviz" is the package's __init__ (the public names:
# load_model, generate, ...), above everything it re-exports and below the front ends that may
# read it (the CLI's --version). docs/ARCHITECTURE.md argues the order.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("specviz.errors", "specviz.old_paths"),        # what every layer raises; the 0.9 paths' finder
    ("specviz.files",),                             # file plumbing: cache dir, shipped files, safe user files
    ("specviz.core",),                              # the data: tree, trace, settings, decoding, timing
    ("specviz.models",),                            # the target model: loading, KV cache, hidden states, cost
    ("specviz.index", "specviz.retrieval"),         # what model-free drafters look text up in
    ("specviz.netkit",),                            # the draft-network kit: checkpoints, data, the target's pass, the recipe
    ("specviz.glide", "specviz.heads", "specviz.eagle"),  # the methods' networks (glide/ holds GLIDE only)
    # mtp/ reads configs with eagle/checkpoint.py until netkit/checkpoint.py holds that; then it
    # joins heads/ and eagle/ on their rung
    ("specviz.mtp",),
    ("specviz.drafters.kit",),                      # what drafters share: protocol, registry, chain loop
    ("specviz.drafters",),                          # one module per method, and the registry package
    ("specviz.engine",),                            # the loop, verify, accept
    ("specviz.analysis",),                          # conclusions from runs: divergence, doctor
    ("specviz.viz",),                               # figures and narration from traces
    ("specviz.peers",),                             # other projects' implementations behind our contract
    ("specviz",),                                   # the public names
    ("specviz.bench",),                             # front ends: the bench, run by the CLI and read by the UI
    ("specviz.cli", "specviz.ui"),
    ("specviz.__main__",),
)
ROOT_MODULES = {"specviz", "specviz.__main__", "specviz.errors", "specviz.old_paths"}


def _modules(package: Path = PACKAGE) -> dict[str, Path]:
    out = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
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
    assert "specviz.cli.common" in graph["specviz.cli"]       # the commands are imported in build_parser
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


def _modules_loaded(code: str, matching: str) -> list[str]:
    """The modules, named `m`, for which the expression `matching` holds after `code` runs in a
    fresh interpreter."""
    probe = f"import sys\n{code}\nprint(sorted(m for m in sys.modules if {matching}))"
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return ast.literal_eval(done.stdout.strip())


def test_engine_packages_do_not_load_the_cli() -> None:
    assert _modules_loaded(f"import {', '.join(ENGINE)}", "m == 'specviz.cli' or m.startswith('specviz.cli.')") == []


def test_the_cli_parser_loads_without_transformers_model_code() -> None:
    """Every command's parser (the drafter registry with it: --help, refusals, `specviz
    drafters`) is built without importing a transformers model's modelling code, which costs
    about 2 s of a CLI start; GLIDE's layer imports Llama's pieces when a draft is built."""
    assert _modules_loaded("from specviz.cli import build_parser\nbuild_parser()",
                           "m.startswith('transformers.models.') and m.rsplit('.', 1)[-1].startswith('modeling_')") == []
    assert _modules_loaded("from specviz.cli import build_parser\nbuild_parser('generate')",
                           "m in ('transformers.modeling_utils', 'specviz.models.grouped_attention')") == []


def test_a_command_imports_only_its_own_module() -> None:
    """`specviz generate` builds only generate's parser: the bench's figures (plotly) and the
    trainers are not imported on its way to the first step; the other commands stay listed."""
    from specviz.cli import named_command

    code = ("from specviz.cli import build_parser\np = build_parser('generate')\n"
            "assert p.parse_args(['generate', '--prompt', 'x']).command == 'generate'")
    assert _modules_loaded(code, "m == 'plotly' or m in ('specviz.cli.bench', 'specviz.cli.train_eagle')") == []
    assert named_command(["--version"]) is None
    assert named_command(["bench", "--drafters", "x"]) == "bench"
    assert named_command(["nosuch"]) is None


FRONT_ENDS = ("specviz/cli", "specviz/ui", "specviz/bench")


def _front_end_files() -> list[Path]:
    return [p for d in FRONT_ENDS for p in sorted((ROOT / d).rglob("*.py"))] + [ROOT / "app.py"]


def test_no_front_end_names_a_drafter() -> None:
    """The CLI, the UI and the bench loop over the registry's specs (order, family, flags such
    as is_baseline and needs_reference): no string literal there is a registered drafter's name."""
    from specviz.drafters import REGISTRY

    names = set(REGISTRY)
    offenders = [hit for path in _front_end_files() for hit in drafter_literals(path, names)]
    assert not offenders, offenders


def test_a_named_drafter_would_be_found(tmp_path: Path) -> None:
    probe = tmp_path / "probe_front_end.py"
    probe.write_text('X = "ngram_trie"\nY = "a,oracle"\nZ = "ngram_trie[n=3]"\n', encoding="utf-8")
    hits = drafter_literals(probe, {"ngram_trie", "oracle"})
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


# --- the house, by folder ----------------------------------------------------------------------

def folder_of(name: str, layers: Sequence[Sequence[str]] = LAYERS) -> tuple[int, str] | None:
    """(rung, folder) of a module: the longest folder in `layers` that holds it."""
    best: tuple[int, str] | None = None
    for rung, folders in enumerate(layers):
        for folder in folders:
            if (name == folder or name.startswith(folder + ".")) and (best is None or len(folder) > len(best[1])):
                best = (rung, folder)
    return best


def layer_breaches(imports: Sequence[tuple[str, int, str]],
                   layers: Sequence[Sequence[str]] = LAYERS) -> list[str]:
    """Each import (module, line, target) that leaves its folder for a rung not below its own, or
    whose module or target no folder holds."""
    out = []
    for name, line, target in imports:
        here, there = folder_of(name, layers), folder_of(target, layers)
        if here is None or there is None:
            out.append(f"{name}:{line} imports {target}: {name if here is None else target} is in no layer")
        elif here[1] != there[1] and there[0] >= here[0]:
            side = "its own rung" if there[0] == here[0] else "a rung above"
            out.append(f"{name}:{line} imports {target} ({there[1]}, {side} of {here[1]})")
    return out


def test_every_module_imports_only_its_folder_and_the_rungs_below() -> None:
    modules = _modules()
    breaches = layer_breaches(_all_imports(modules))
    assert not breaches, "\n".join(breaches)


def test_every_folder_of_the_package_is_on_a_rung() -> None:
    modules = _modules()
    packages = {name for name in modules if _is_package(name, modules)}
    named = {folder for folders in LAYERS for folder in folders}
    # a package is on a rung itself or inside a folder that is; "specviz" (the public names) holds
    # only the root's modules, so a new folder must be given its own rung
    loose = sorted(p for p in packages if p != "specviz" and folder_of(p)[1] == "specviz")
    assert not loose, f"folders on no rung of LAYERS: {loose}"
    gone = sorted(f for f in named if f not in modules)
    assert not gone, f"LAYERS names folders that are not there: {gone}"
    # the check on a folder no rung names
    assert [p for p in ("specviz.core", "specviz.newfolder", "specviz.drafters.kit")
            if folder_of(p)[1] == "specviz"] == ["specviz.newfolder"]


def test_a_breach_would_be_found() -> None:
    """The rule on a planted graph: an upward import, in a function or not, and an import
    between neighbours on one rung are caught; a downward one and one inside a folder are not."""
    layers = (("p.low",), ("p.mid", "p.side"), ("p.top",))
    imports = [("p.mid.a", 1, "p.low.b"),            # down: fine
               ("p.mid.a", 2, "p.mid.c"),            # its own folder: fine
               ("p.low.b", 3, "p.mid.a"),            # up
               ("p.mid.a", 4, "p.side.d"),           # a neighbour on its rung
               ("p.low.b", 5, "p.top"),              # up, to a package's __init__
               ("p.top.x", 6, "q.elsewhere")]        # a module no rung holds
    found = layer_breaches(imports, layers)
    assert [b.split(" ")[0] for b in found] == ["p.low.b:3", "p.mid.a:4", "p.low.b:5", "p.top.x:6"], found



def test_the_scan_sees_an_upward_import_in_a_function(tmp_path: Path) -> None:
    """The AST scan on a planted package (a copy of the house's shape, not the real one): an
    upward import inside a function, relative or absolute, is found."""
    package = tmp_path / "specviz"
    for folder in ("core", "engine"):
        (package / folder).mkdir(parents=True)
        (package / folder / "__init__.py").write_text("", encoding="utf-8")
    (package / "__init__.py").write_text("", encoding="utf-8")
    (package / "engine" / "loop.py").write_text("from ..core import tree\n", encoding="utf-8")
    (package / "core" / "tree.py").write_text("import os\n\n\ndef f():\n    from ..engine import loop\n"
                                               "    import specviz.engine\n", encoding="utf-8")
    breaches = layer_breaches(_all_imports(_modules(package)))
    assert [b.split(" (")[0] for b in breaches] == ["specviz.core.tree:5 imports specviz.engine.loop",
                                                     "specviz.core.tree:6 imports specviz.engine"], breaches


def test_a_sub_folder_is_its_own_folder() -> None:
    """drafters/kit is below drafters/: the kit may not import a method or the registry package."""
    assert folder_of("specviz.drafters.kit.base") == (folder_of("specviz.drafters")[0] - 1, "specviz.drafters.kit")
    assert layer_breaches([("specviz.drafters.kit.chain", 1, "specviz.drafters.glide")])
    assert not layer_breaches([("specviz.drafters.glide", 1, "specviz.drafters.kit.chain")])


def loose_root_modules(package: Path = PACKAGE) -> list[str]:
    """The modules at the package's root other than __init__, __main__, errors and old_paths."""
    return sorted(p.name for p in package.glob("*.py")
                  if ("specviz" if p.stem == "__init__" else f"specviz.{p.stem}") not in ROOT_MODULES)


def test_the_root_holds_only_the_entry_points(tmp_path: Path) -> None:
    """Every module but __init__, __main__, errors and old_paths lives in its layer's folder."""
    loose = loose_root_modules()
    assert not loose, f"modules loose at specviz/ (put each in its layer's folder): {loose}"
    for name in ("__init__.py", "errors.py", "verify.py"):
        (tmp_path / name).write_text("", encoding="utf-8")
    assert loose_root_modules(tmp_path) == ["verify.py"]


def test_no_front_end_imports_a_drafter_method() -> None:
    """The front ends reach drafters through the registry (specviz.drafters) and the kit, never a
    method's own module."""
    modules = _modules()
    methods = {name for name in modules if name.startswith("specviz.drafters.")
               and not _in(name, ("specviz.drafters.kit",))}
    assert "specviz.drafters.medusa" in methods and "specviz.drafters.kit.base" not in methods
    offenders = [f"{name}:{line} imports {target}" for name, line, target in _all_imports(modules)
                 if _in(name, FRONT_END_PACKAGES) and target in methods]
    app = ast.parse((ROOT / "app.py").read_text(encoding="utf-8"))
    offenders += [f"app.py:{node.lineno}" for node in ast.walk(app) if isinstance(node, ast.ImportFrom)
                  and node.module and node.module.startswith("specviz.drafters.")]
    assert not offenders, offenders


# --- the 0.9 paths, the public names, an 0.9 plugin ------------------------------------------------

def _run_python(code: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_old_paths_warn_and_give_the_same_module() -> None:
    """In a fresh process (a module warns the first time it is imported): every path in MOVED
    imports, warns once with a DeprecationWarning naming the new path and when it goes, and is
    the module object at the new path; none of them is still a file of its own."""
    from specviz.old_paths import MOVED, REMOVED_IN

    modules = _modules()
    assert not sorted(old for old in MOVED if old in modules), "an old path is a module again"
    assert not sorted(new for new in MOVED.values() if new not in modules), "MOVED names a missing module"
    code = textwrap.dedent("""
        import importlib, json, sys, warnings
        from specviz.old_paths import MOVED
        out = {}
        for old, new in MOVED.items():
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                module = importlib.import_module(old)
                again = importlib.import_module(old)
            out[old] = {"same": module is again is sys.modules[new] is importlib.import_module(new),
                        "warnings": [str(w.message) for w in caught if w.category is DeprecationWarning]}
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            from specviz.drafters.base import DrafterSpec          # a from-import of an old path
            from specviz.settings import setting
        from specviz.drafters.kit.base import DrafterSpec as new_spec
        out["from-import"] = {"same": DrafterSpec is new_spec, "warnings": [str(w.message) for w in caught]}
        print(json.dumps(out))
    """)
    got = json.loads(_run_python(code).strip().splitlines()[-1])
    assert set(got) == set(MOVED) | {"from-import"}
    for old, new in MOVED.items():
        assert got[old]["same"], f"{old} is not the module at {new}"
        assert got[old]["warnings"] == [f"{old} moved to {new}; the old path goes in specviz {REMOVED_IN}"], \
            (old, got[old]["warnings"])
    assert got["from-import"]["same"]
    # both were imported by the loop above already: a module warns once per process
    assert got["from-import"]["warnings"] == []


def test_the_public_names_import() -> None:
    """`from specviz import ...` for 0.9's public names, and the old engine/models modules' names
    from the packages that replaced them."""
    code = textwrap.dedent("""
        import warnings
        warnings.filterwarnings("error", r"specviz\\.", DeprecationWarning)   # no old path behind the public names
        from specviz import (DRAFTERS, DecodingConfig, DraftTree, Prompt, SpecvizError, StepRecord, Trace,
                             __version__, build_prompt, build_trace, generate, generate_steps, load_model)
        from specviz.engine import build_trace, check_fits, check_token_settings, generate, generate_steps, reference_config
        from specviz.models import LoadedModel, load_model, resolve_device, resolve_dtype, tiny_random_model
        from specviz.drafters import DraftContext, DrafterSpec, DraftSetup, StepView, REGISTRY
        import specviz
        assert set(specviz.__all__) == {"__version__", "DRAFTERS", "DecodingConfig", "DraftTree", "Prompt",
            "SpecvizError", "StepRecord", "Trace", "build_prompt", "build_trace", "generate", "generate_steps",
            "load_model"}, specviz.__all__
        assert DRAFTERS is REGISTRY and "vanilla" in DRAFTERS
        print("ok")
    """)
    assert _run_python(code).strip().splitlines()[-1] == "ok"


# the 0.9 import lines of examples/specviz-echo-drafter, and the ones it has now
OLD_PLUGIN_IMPORTS = ("from specviz.drafters.base import DraftContext, DrafterSpec, DraftSetup, StepView\n"
                      "from specviz.settings import Settings, setting\n"
                      "from specviz.tree import DraftTree\n")
NEW_PLUGIN_IMPORTS = ("from specviz.core.settings import Settings, setting\n"
                      "from specviz.core.tree import DraftTree\n"
                      "from specviz.drafters import DraftContext, DrafterSpec, DraftSetup, StepView\n")


def test_a_plugin_on_the_old_paths_still_registers(tmp_path: Path) -> None:
    """The example plugin with its 0.9 imports, installed as a distribution folder on the path (an
    entry point importlib.metadata finds, as for a pip-installed plugin): it registers, runs, and
    the old paths it used warn."""
    example = ROOT / "examples" / "specviz-echo-drafter" / "specviz_echo_drafter" / "__init__.py"
    text = example.read_text(encoding="utf-8")
    assert NEW_PLUGIN_IMPORTS in text, "the example's imports changed: update this test"
    package = tmp_path / "specviz_echo_old"
    package.mkdir()
    (package / "__init__.py").write_text(text.replace(NEW_PLUGIN_IMPORTS, OLD_PLUGIN_IMPORTS)
                                         .replace('DrafterSpec("echo"', 'DrafterSpec("echo_old"'), encoding="utf-8")
    dist = tmp_path / "specviz_echo_old-0.9.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: specviz-echo-old\nVersion: 0.9\n", encoding="utf-8")
    (dist / "entry_points.txt").write_text("[specviz.drafters]\necho_old = specviz_echo_old:SPEC\n", encoding="utf-8")
    code = textwrap.dedent("""
        import warnings
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            from specviz.drafters import REGISTRY
            from specviz.drafters.kit.plugins import FAILED
        from specviz import DecodingConfig, build_prompt, generate, load_model
        assert "echo_old" in REGISTRY, FAILED
        lm = load_model("tiny-random", device="cpu", dtype="float32")
        prompt = build_prompt(lm.tokenizer, "la la la la la la")
        decoding = DecodingConfig(max_new_tokens=12)
        echo = generate(lm, prompt, "echo_old", decoding=decoding)
        vanilla = generate(lm, prompt, "vanilla", decoding=decoding)
        assert echo.output_ids == vanilla.output_ids
        for w in caught:
            if w.category is DeprecationWarning:
                print("warned:", w.message)
        print("registered")
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(tmp_path)]))
    out = _run_python(code, env).splitlines()
    assert out[-1] == "registered"
    for old, new in (("specviz.drafters.base", "specviz.drafters.kit.base"), ("specviz.settings", "specviz.core.settings"),
                     ("specviz.tree", "specviz.core.tree")):
        assert any(line.startswith(f"warned: {old} moved to {new}") for line in out), out


def old_path_imports(path: Path, name: str | None, moved: dict[str, str]) -> list[str]:
    """Imports in the file at `path` (module `name` when it is inside specviz/, for relative
    imports) that name a 0.9 path of `moved`."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            named = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level and name:
                package = name if path.name == "__init__.py" else name.rpartition(".")[0]
                for _ in range(node.level - 1):
                    package = package.rpartition(".")[0]
                base = f"{package}.{node.module}" if node.module else package
            named = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        found += [f"{shown_path(path)}:{node.lineno} {n}" for n in named if n in moved]
    return found


def test_nothing_here_imports_an_old_path(tmp_path: Path) -> None:
    """The package, its tests, scripts, benchmarks, examples and app.py use the new paths (only
    this file names old ones, to test them)."""
    from specviz.old_paths import MOVED

    modules = {path: name for name, path in _modules().items()}
    files = [*modules, ROOT / "app.py", *[p for d in ("tests", "scripts", "benchmarks", "examples")
                                          for p in sorted((ROOT / d).rglob("*.py"))]]
    offenders = [hit for path in files if path != Path(__file__).resolve()
                 for hit in old_path_imports(path, modules.get(path), MOVED)]
    assert not offenders, offenders
    # the check finds the three forms
    probe = {"specviz.verify": "x", "specviz.drafters.base": "y"}
    lines = "import specviz.verify\nfrom specviz import verify\nfrom ..drafters.base import DrafterSpec\nimport specviz.tree\n"
    fake = tmp_path / "probe_old_paths.py"
    fake.write_text(lines, encoding="utf-8")
    hits = old_path_imports(fake, "specviz.engine.loop", probe)
    assert [h.split(":")[1] for h in hits] == ["1 specviz.verify", "2 specviz.verify", "3 specviz.drafters.base"], hits
