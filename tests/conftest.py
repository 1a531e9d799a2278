"""Shared fixtures for the engine's tests.

- `tiny_lm`: a 2-layer random Llama with a 64-token vocabulary and no tokenizer (ids in,
  StepRecords out via engine.generate_steps). Small vocabulary: greedy output repeats itself,
  so n-gram drafts do get accepted. No EOS: every generation runs to max_new_tokens.
- `tiny_lm_tok`: load_model("tiny-random"), the same kind of model with the embedded
  49152-token tokenizer, for tests that need text (prompts, traces, stop strings).
- `embedded_lm`: the embedded SmolLM2-135M-Instruct; only for tests marked `slow`.
- `panel`: the explorer's setup panel, for the UI tests.

Helpers shared by several test files live here too (`run_ids`).
"""
from __future__ import annotations

import ast
import http.server
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

import pytest
import torch

from specviz.models.cost import calibrate
from specviz.models.cpu_linear import use_few_row_linear
from specviz.models.grouped_attention import use_grouped_attention
from specviz.core.decoding import DecodingConfig
from specviz.engine import generate_steps
from specviz.models import LoadedModel, load_model, tiny_random_model
from specviz.core.trace import StepRecord, Totals, Trace
from specviz.core.tree import DraftTree

# No forward-cost curve kept on disk between tests (models/cost_cache.py): each test process times
# its models once, as before the store; tests/test_cost_cache.py points the store at its own folders.
os.environ.setdefault("SPECVIZ_COST_CURVES", "off")

# The test models are tiny: one thread is ~10x faster than two when the other core is busy
# (OpenMP threads spin waiting for each other). SPECVIZ_TEST_THREADS overrides.
torch.set_num_threads(int(os.environ.get("SPECVIZ_TEST_THREADS", "1")))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "slow: runs the embedded SmolLM2-135M model (minutes on CPU); "
                   "deselect with -m 'not slow'")


@pytest.fixture(scope="session")
def tiny_lm() -> LoadedModel:
    model = tiny_random_model(vocab_size=64, seed=0).eval()
    use_few_row_linear(model)                      # as load_model does on a CPU
    use_grouped_attention(model)
    return LoadedModel(model_id="tiny-64", model=model, tokenizer=None, device=torch.device("cpu"),
                       dtype=torch.float32, max_positions=4096, eos_ids=frozenset(),
                       verify_cost=calibrate(model), cpu_linear=True)


@pytest.fixture(scope="session")
def tiny_lm_tok() -> LoadedModel:
    return load_model("tiny-random", device="cpu", dtype="float32")


@pytest.fixture(scope="session")
def embedded_lm() -> LoadedModel:
    return load_model("embedded", device="cpu", dtype="float32")


@pytest.fixture(scope="module")
def served() -> Any:
    """The whole explorer served for a module's /trace API cases: (URL, gradio Client)."""
    from tests.serving import served_explorer

    with served_explorer() as served:
        yield served


@pytest.fixture()
def panel() -> Any:
    """The explorer's setup panel (specviz.ui.setup_panel), built outside a page, with the
    context and message boxes the page gives it."""
    gr = pytest.importorskip("gradio")

    from specviz.ui.setup_panel import build_setup_panel

    with gr.Blocks():
        p = build_setup_panel()
        p.context, p.message = gr.Textbox(), gr.Textbox()
    return p


def network_drafter_config(lm: LoadedModel, kind: str, tmp_path: Path, tmp_path_factory: Any) -> dict[str, Any]:
    """A drafter config with a quickly made checkpoint for glide (trained 6 steps, tests/test_glide.py)
    or medusa / hydra (random heads, tests/test_heads.py), for the tests that run them in every recorder."""
    if kind == "glide":
        from test_glide import _trained

        return {"checkpoint": str(_trained(lm, tmp_path_factory, "glide-tiny", 6)), "gamma": 2}
    from test_heads import _random_ckpt

    return {"checkpoint": str(_random_ckpt(lm, tmp_path / f"{kind}.pt", kind))}


def run_ids(lm: LoadedModel, prompt: Sequence[int], drafter: str = "vanilla",
            config: Any = None, recorder: str = "teach", **decoding: Any) -> tuple[list[int], list[StepRecord]]:
    """Generate from token ids (`recorder`: engine/record.py's); returns (output ids, step records)."""
    steps = list(generate_steps(lm, list(prompt), drafter, config, DecodingConfig(**decoding), recorder=recorder))
    return [t for s in steps for t in s.new_tokens], steps


def assert_shipped_heads_equal_vanilla(lm: LoadedModel, kinds: Sequence[str]) -> None:
    """Each draft-head drafter in `kinds`, on its shipped checkpoint with its defaults and with its
    'paper' preset, generates plain decoding's 32 tokens for a hash-table question on `lm` (the
    embedded model); with the preset, its drafts are accepted (4 tokens at least)."""
    from specviz.drafters.kit.base import get
    from specviz.models.prompts import build_prompt

    prompt = build_prompt(lm.tokenizer, "Explain what a hash table is.")
    vanilla, _ = run_ids(lm, prompt.ids, max_new_tokens=32)
    for kind in kinds:
        for cfg in ({}, dict(get(kind).presets["paper"].values)):
            out, steps = run_ids(lm, prompt.ids, kind, cfg, max_new_tokens=32)
            assert out == vanilla, (kind, cfg)
            if cfg:
                assert sum(len(s.accepted) for s in steps) >= 4, kind


def self_data(lm: LoadedModel, n: int, length: int) -> list[torch.Tensor]:
    """n rows of the model's own greedy text (4 random start ids < 64, then its continuation to
    `length` tokens), as batches [4, length]: what draft heads can learn to predict."""
    g = torch.Generator().manual_seed(0)
    rows = []
    for _ in range(n):
        start = torch.randint(3, 64, (4,), generator=g).tolist()
        out, _ = run_ids(lm, start, max_new_tokens=length - 4)
        rows.append(start + out)
    data = torch.tensor(rows)
    return [data[i:i + 4] for i in range(0, n, 4)]


def model_documents(lm: LoadedModel, rng: Any, n: int = 12) -> list[list[int]]:
    """n token documents for a corpus the model agrees with: 6 random ids (< 64, from `rng`)
    and the model's greedy 40-token continuation of them."""
    docs = []
    for _ in range(n):
        prompt = [rng.randrange(64) for _ in range(6)]
        docs.append(prompt + run_ids(lm, prompt, max_new_tokens=40)[0])
    return docs


def first_child_path(tree: Any) -> tuple[tuple[int, ...], int]:
    """For deliberately wrong acceptance rules: the path that follows each node's first child
    from the root down, whatever the target says, and its last node (-1: the root)."""
    path, node = [], -1
    while tree.children[node]:
        node = tree.children[node][0]
        path.append(node)
    return tuple(path), node


def assert_export_loads(ckpt: Any, src: Path, original: Any, lm: LoadedModel, tmp_path: Path) -> Any:
    """`ckpt.export` (glide/ or heads/ checkpoint module) of the checkpoint `src`: no training
    state, smaller than src, and it loads back in fp32 close to `original` (the model src
    loads as; integer buffers equal). Returns the loaded copy."""
    slim = tmp_path / "slim.pt"
    ckpt.export(src, slim)
    assert ckpt.read(slim)["training"] is None and slim.stat().st_size < src.stat().st_size
    copy, _ = ckpt.load(slim, lm.model, lm.model_id)
    for p, q in zip(original.state_dict().values(), copy.state_dict().values(), strict=True):
        if p.is_floating_point():
            assert q.dtype == torch.float32
            torch.testing.assert_close(p, q, atol=1e-2, rtol=1e-2)
        else:
            assert torch.equal(p, q)
    return copy


def assert_checkpoint_files_refused(lm: LoadedModel, drafter: str, tmp_path: Path, train_hint: str,
                                    not_one: str) -> None:
    """`drafter` (a checkpoint drafter) refuses, with a CheckpointError, a checkpoint file that
    does not exist, saying how to train one (`train_hint`), and a file that is not a checkpoint,
    saying what it expected (`not_one`)."""
    from specviz.glide.checkpoint import CheckpointError

    with pytest.raises(CheckpointError, match=train_hint):
        generate_steps(lm, [5, 6, 7], drafter, {"checkpoint": str(tmp_path / "none.pt")})
    bad = tmp_path / "bad.pt"
    bad.write_text("not a checkpoint")
    with pytest.raises(CheckpointError, match=not_one):
        generate_steps(lm, [5, 6, 7], drafter, {"checkpoint": str(bad)})


def bench_one_question(lm: LoadedModel, drafters: str, peers: str, max_new_tokens: int, text: str) -> tuple[Any, list]:
    """The bench's methods (`--drafters`, `--peers`) on one single-turn question: (the Bench, its runs)."""
    from specviz.bench.methods import parse_methods
    from specviz.bench.questions import Question
    from specviz.bench.runner import Bench

    methods, _ = parse_methods(drafters, peers)
    bench = Bench(lm, methods, max_new_tokens)
    return bench, bench.run_question(Question(1, "qa", (text,)), 0)


ROOT = Path(__file__).resolve().parent.parent


def run_cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """`python -m specviz ARGS` in a subprocess, this checkout first on the path."""
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-m", "specviz", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def run_cli_here(*args: str) -> subprocess.CompletedProcess:
    """The CLI's `main(ARGS)` in this process, its exit code and output as run_cli gives them (an
    exception that escapes main: exit code 1 and its traceback on stderr, as the interpreter
    would print it). For the tables of refusals, which end before any real work: a fresh
    interpreter costs seconds of imports per case (test_cli runs the entry point itself)."""
    import contextlib
    import io
    import traceback

    from specviz.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as stop:                       # argparse's own refusals
            code = stop.code if isinstance(stop.code, int) else 1
        except Exception:  # noqa: BLE001 - reported as the interpreter would, for the test to see
            traceback.print_exc()
            code = 1
    return subprocess.CompletedProcess(["specviz", *args], code, out.getvalue(), err.getvalue())


def run_cli_cases(cases: dict[str, tuple[tuple[str, ...], tuple[str, ...]]],
                  files: dict[str, Path]) -> dict[str, subprocess.CompletedProcess]:
    """A table of CLI refusals {name: (args, words)}, each run through run_cli_here; `{key}` in an
    argument is filled from `files`."""
    return {name: run_cli_here(*(a.format(**files) for a in args)) for name, (args, _) in cases.items()}


def assert_one_line_refusal(proc: subprocess.CompletedProcess, words: Sequence[str], alone: bool = True) -> None:
    """Refused as the CLI refuses: exit code 2, no traceback, nothing on stdout, and one line
    `specviz: error: ...` holding every word (`alone`: the only line on stderr)."""
    assert proc.returncode == 2, (proc.args, proc.returncode, proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    errors = lines if alone else [line for line in lines if line.startswith("specviz: error: ")]
    assert len(errors) == 1 and errors[0].startswith("specviz: error: "), proc.stderr
    assert all(w in errors[0] for w in words), (words, errors[0])
    assert proc.stdout == "", proc.stdout                     # refused before any output


def hand_trace(drafter: str, info: dict[str, Any] | None = None) -> Trace:
    """Prompt 'A B C D', context 'B C D'; the draft copied 'C' (accepted) and 'D'."""
    token_text = {1: "A", 2: " B", 3: " C", 4: " D", 9: "!"}
    tree = DraftTree.chain([3, 4], "context")
    step = StepRecord(index=0, committed_len=4, tree=tree, accepted=(0,), bonus=9, new_tokens=(3, 9),
                      target_top=(3, 3, 9), target_prob=(0.9, 0.1), timings={}, wall=0.01,
                      info=info if info is not None else {"match_len": 1, "positions": [2, 3]})
    return Trace("m", drafter, {}, {}, "A B C D", (1, 2, 3, 4), (step,), (3, 9), " C!",
                 token_text, Totals.of([step]), "length", context_char_span=(2, 7),
                 output_pieces=(" C", "!"), prompt_pieces=("A", " B", " C", " D"))


def _colour_keys(tree: ast.AST) -> set[int]:
    """The ids of the keys of colour tables ({"lookahead": "#a6e3df", ...}) in `tree`."""
    keys: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict) and node.values and all(
                isinstance(v, ast.Constant) and isinstance(v.value, str) and v.value.startswith("#") for v in node.values):
            keys |= {id(k) for k in node.keys}
    return keys


def shown_path(path: Path) -> str:
    """`path` as a finding names it: relative to the checkout, or whole outside it (a probe in
    a test's tmp_path, never in the tree, where a check running beside it would see it)."""
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def drafter_literals(path: Path, names: set[str], skip_colour_tables: bool = False) -> list[str]:
    """String literals in `path` (under ROOT) that are a drafter's name (one of `names`) or a list
    of names ("a,b"; prose, which has spaces, may mention drafters), as "file:line 'literal'".
    skip_colour_tables: pass over the keys of colour tables, draft-node source labels (which a
    drafter chooses and which may equal a drafter's name), not drafter names."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    labels = _colour_keys(tree) if skip_colour_tables else set()
    found = []
    for node in ast.walk(tree):
        if id(node) in labels:
            continue
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and " " not in node.value.strip() \
                and set(node.value.strip().split(",")) & names:
            found.append(f"{shown_path(path)}:{node.lineno} {node.value!r}")
    return found


def raised_one_line(make: Callable[[], Any], errors: type[BaseException] | tuple[type[BaseException], ...],
                    words: Sequence[str]) -> str:
    """`make()` raises one of `errors` whose message is one line holding every one of `words`;
    the message."""
    with pytest.raises(errors) as info:
        make()
    text = str(info.value)
    assert "\n" not in text and all(w in text for w in words), text
    return text


def target_features(lm: LoadedModel, tokens: Sequence[int], layers: Sequence[int],
                    rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    """One forward of the target over `tokens`: (ids [1, T], the hidden states of `layers` at
    rows 0 .. rows-1 as a drafter reads them [1, rows, F])."""
    from specviz.models.hidden import HiddenCapture

    ids = torch.tensor([list(tokens)])
    capture = HiddenCapture(lm.model, tuple(layers))
    with torch.no_grad(), capture:
        lm.model(input_ids=ids)
    return ids, capture.rows(list(range(rows)))[None]                                    # [1, rows, F]


def eagle_train_heads(target: Any, out: Path) -> list[Any]:
    """An EAGLE and an EAGLE-3 training head for the 64-token tiny target (vocabulary all 64 ids,
    24-token rows, 3 held-out positions, EAGLE-3 unrolled twice), in out/eagle and out/eagle3."""
    from specviz.eagle.train import EagleHead, EagleTrainConfig

    vocab = torch.arange(64)
    return [EagleHead(target, "tiny-64", EagleTrainConfig(kind=k, vocab=64, seq_len=24, ttt=2 if k == "eagle3" else 1,
                                                          positions=3, lr=1e-2), vocab, out / k)
            for k in ("eagle", "eagle3")]


class QuietHandler(http.server.BaseHTTPRequestHandler):
    """A request handler for the tests' local HTTP servers: no log lines; `send_body` answers 200."""

    def send_body(self, body: bytes, content_type: str | None = None) -> None:
        self.send_response(200)
        if content_type is not None:
            self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def benchmark_script(name: str) -> Any:
    """benchmarks/<name>.py imported as a module (the scripts are not a package)."""
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
