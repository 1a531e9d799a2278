"""The run service (specviz/engine/service.py): a RunRequest runs to the Trace engine.generate
gives; a drafter choice is parsed, merged and validated once, before any model loads; the CLI's
`generate`, the explorer and the bench all run through it."""
from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from specviz import cli
from specviz.core.decoding import DecodingConfig
from specviz.core.trace import Trace
from specviz.drafters.kit.base import DrafterSpec
from specviz.drafters.kit.choice import DrafterChoiceError
from specviz.engine import generate, service
from specviz.errors import ConfigError, UnknownDrafterError
from specviz.models.prompts import build_prompt

CONTEXT = "the cat sat on the mat. the cat sat on the mat. the cat sat on the"


def tiny_request(drafter: str, settings: dict[str, Any] | None = None, max_new_tokens: int = 10) -> service.RunRequest:
    return service.RunRequest("tiny-random", drafter, tuple((settings or {}).items()),
                              decoding=DecodingConfig(max_new_tokens=max_new_tokens), message="Repeat.",
                              context=CONTEXT, device="cpu", dtype="float32")


def essentials(trace: Trace) -> tuple:
    """A trace without its clock readings (seconds, phase times, peak memory)."""
    return (trace.model_id, trace.drafter, trace.drafter_config, trace.decoding, trace.prompt_text,
            trace.prompt_ids, trace.output_ids, trace.output_text, trace.stop_reason, trace.device, trace.dtype,
            trace.token_text, trace.errors, trace.runtime,
            [(s.index, s.tree.tokens, s.tree.parents, s.accepted, s.bonus, s.new_tokens, s.target_top, s.stop)
             for s in trace.steps])


@pytest.fixture
def validations(monkeypatch: pytest.MonkeyPatch) -> Counter:
    """How many times each drafter's config is validated (DrafterSpec.config calls, by name)."""
    calls: Counter = Counter()
    original = DrafterSpec.config

    def counting(self: DrafterSpec, values: Any = None) -> Any:
        calls[self.name] += 1
        return original(self, values)

    monkeypatch.setattr(DrafterSpec, "config", counting)
    return calls


# ---- the contract ---------------------------------------------------------------------------------

def test_a_request_runs_to_the_trace_engine_generate_gives(tiny_lm_tok) -> None:
    request = tiny_request("ngram_trie@paper[num_draft=4]", {"n": "6"})
    trace = service.run(request)
    prompt = build_prompt(tiny_lm_tok.tokenizer, "Repeat.", context=CONTEXT)
    values = {**dict(service.parse("ngram_trie@paper").values()), "num_draft": 4, "n": 6}
    direct = generate(tiny_lm_tok, prompt, "ngram_trie", values, request.decoding)
    assert essentials(trace) == essentials(direct)
    assert trace.drafter_config["num_draft"] == 4 and trace.drafter_config["n"] == 6
    assert trace.drafter_config["insert_output"] is False                 # the preset's value


def test_the_steps_pulled_are_kept_and_a_stopped_run_still_has_its_trace(tiny_lm_tok) -> None:
    live = service.start(tiny_request("vanilla", max_new_tokens=8))
    first, second = live.advance(), next(iter(live))
    assert live.steps == [first, second]
    live.close()
    stopped = live.trace()
    assert stopped.stop_reason == "stopped" and len(stopped.output_ids) == 2
    full = service.run(tiny_request("vanilla", max_new_tokens=8))
    assert full.output_ids[:2] == stopped.output_ids and full.stop_reason == "length"


def test_a_drafter_that_needs_a_reference_gets_the_baselines_output(tiny_lm_tok) -> None:
    told = []
    live = service.start(tiny_request("oracle"), on_reference=told.append)
    for _ in live:
        pass
    trace = live.trace()
    assert [s.name for s in told] == ["vanilla"] and live.reference is not None
    assert trace.drafter_config["tokens"] == list(live.reference.output_ids) == list(trace.output_ids)
    given = service.start(tiny_request("oracle"), reference=live.reference.output_ids, on_reference=told.append)
    assert given.reference is None and len(told) == 1                     # the caller's ids: no baseline run
    assert given.config.tokens == live.reference.output_ids


def test_the_config_is_validated_once(tiny_lm_tok, validations: Counter) -> None:
    service.run(tiny_request("ngram_trie@paper[num_draft=4]", {"n": "6"}))
    assert validations["ngram_trie"] == 1
    service.run(tiny_request("oracle"))                  # the baseline's ids filled in: not parsed again
    assert validations["oracle"] == 1 and validations["vanilla"] == 1


@pytest.mark.parametrize("drafter, settings, error, words", [
    ("ngram_trie[num_draft=0]", {}, ConfigError, "num_draft"),
    ("ngram_trie", {"num_draft": "many"}, ConfigError, "num_draft"),
    ("nope", {}, UnknownDrafterError, "unknown drafter"),
    ("ngram_trie@nope", {}, DrafterChoiceError, "no preset"),
    ("ngram_trie[n=8]", {"n": "10"}, DrafterChoiceError, "n=8 in the brackets and --set n=10"),
    ("oracle", {"tokens": "1, x"}, ConfigError, "comma-separated integers"),
])
def test_a_bad_choice_fails_before_the_model_loads(monkeypatch: pytest.MonkeyPatch, drafter: str,
                                                   settings: dict, error: type, words: str) -> None:
    def no_loading(request: Any) -> Any:
        raise AssertionError("the model was loaded before the drafter choice was checked")

    monkeypatch.setattr(service, "load", no_loading)
    with pytest.raises(error, match=words):
        service.start(tiny_request(drafter, settings))


def test_token_ids_given_as_text_are_read() -> None:
    drafter = service.resolve(service.RunRequest(drafter="oracle", settings=(("tokens", "3, 17,9"),)))
    assert drafter.config.tokens == (3, 17, 9) and not drafter.wants_reference


def test_the_web_policy_sees_the_values_before_they_are_validated() -> None:
    seen = []

    def vet(spec: DrafterSpec, values: Any) -> None:
        seen.append((spec.name, dict(values)))
        raise PermissionError("refused")

    with pytest.raises(PermissionError):
        service.resolve(service.RunRequest(drafter="ngram_trie@paper[num_draft=0]"), vet=vet)
    assert seen[0][0] == "ngram_trie" and seen[0][1]["num_draft"] == "0" and seen[0][1]["n"] == 13


# ---- the front ends go through it, and validate once ------------------------------------------------

@pytest.fixture
def starts(monkeypatch: pytest.MonkeyPatch) -> list[service.RunRequest]:
    """The requests service.start is called with (it runs them as before)."""
    seen: list[service.RunRequest] = []
    original = service.start

    def spy(request: service.RunRequest, **options: Any) -> service.Run:
        seen.append(request)
        return original(request, **options)

    monkeypatch.setattr(service, "start", spy)
    return seen


def test_the_cli_runs_through_the_service(capsys: pytest.CaptureFixture, starts: list,
                                          validations: Counter) -> None:
    code = cli.main(["generate", "--model", "tiny-random", "--device", "cpu", "--dtype", "float32",
                     "--drafter", "ngram_trie@paper[num_draft=4]", "--set", "n=6", "--prompt", "Repeat.",
                     "--max-new-tokens", "6", "--no-stream"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert [(r.model_id, r.drafter, r.settings, r.device) for r in starts] == \
        [("tiny-random", "ngram_trie@paper[num_draft=4]", (("n", "6"),), "cpu")]
    assert validations["ngram_trie"] == 1


def test_a_bad_cli_choice_fails_before_the_model_loads(capsys: pytest.CaptureFixture,
                                                       monkeypatch: pytest.MonkeyPatch, starts: list) -> None:
    from specviz.models import loading

    monkeypatch.setattr(loading, "_load", lambda *a, **k: (_ for _ in ()).throw(AssertionError("loads a model")))
    monkeypatch.setattr(loading, "_CACHE", {})
    code = cli.main(["generate", "--model", "tiny-random", "--drafter", "ngram_trie[num_draft=0]", "--prompt", "hi"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "--set num_draft" in err and not starts


def test_the_explorer_runs_through_the_service(tiny_lm_tok, starts: list, validations: Counter) -> None:
    from specviz.ui import runner

    request = service.RunRequest("tiny-random", "ngram_trie@paper", (("num_draft", 4),), "settings",
                                 DecodingConfig(max_new_tokens=5), "Repeat.", CONTEXT)
    trace = runner.run_to_end(request)
    assert [(r.drafter, r.settings, r.settings_source) for r in starts] == \
        [("ngram_trie@paper", (("num_draft", 4),), "settings")]
    assert trace.drafter_config["num_draft"] == 4 and validations["ngram_trie"] == 1


def test_the_explorers_generate_button_validates_once(panel: Any, starts: list, validations: Counter) -> None:
    from specviz.ui import run_panel
    from specviz.ui.session import Session

    form = panel.form(model="tiny-random", drafter="ngram_trie", context=CONTEXT, message="Repeat.", max_new_tokens=5)
    assert isinstance(panel.request(form), service.RunRequest)           # the form builds the service's request
    session = Session()
    list(run_panel.make_stream_handler(panel)(session, **form))
    assert session.trace is not None and session.trace.totals.new_tokens == 5
    assert len(starts) == 1 and validations["ngram_trie"] == 1


def test_the_bench_runs_through_the_service_and_validates_at_parse(tiny_lm_tok, starts: list,
                                                                   validations: Counter) -> None:
    from specviz.bench.methods import parse_methods
    from specviz.bench.questions import Question
    from specviz.bench.runner import Bench

    methods, _ = parse_methods("ngram_trie@paper,oracle", "")
    assert validations["ngram_trie"] == 1 and validations["oracle"] == 1
    bench = Bench(tiny_lm_tok, methods, 6)
    runs = [r for rep in range(2) for r in bench.run_question(Question(1, "qa", (CONTEXT,)), rep)]
    assert [r.method for r in runs] == ["vanilla", "ngram_trie@paper", "oracle"] * 2
    assert len({r.output_ids for r in runs}) == 1                           # greedy: all alike
    assert [r.drafter for r in starts] == [m.label for m in methods] * 2
    assert {r.recorder for r in starts} == {"bench"}                        # what the bench reads, no more

    assert validations["ngram_trie"] == 1 and validations["oracle"] == 1     # none per run
