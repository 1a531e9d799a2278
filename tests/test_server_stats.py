"""Servers' per-request speculative statistics as the planner's acceptance (analysis/server_stats.py,
`specviz plan --stats`). The fixtures in tests/fixtures/server_stats/ are responses in each engine's
documented shape; SOURCES.md there cites where each field comes from."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import assert_one_line_refusal, run_cli_here
from specviz.analysis.server_stats import StatsFormatError, parse_stats, read_stats
from specviz.models.cost_surface import CostSurface, save_surface

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "server_stats"


def test_vllm_summary_gives_the_steps_by_draft_length():
    """vLLM's documented example: 43 steps drafting 3, accepting 0 (39), 1 (1) or 3 (3)."""
    stats = read_stats(FIXTURES / "vllm_summary.json")
    assert stats.engine == "vllm" and stats.shape == "acceptance_histogram_by_draft_length" and stats.exact
    (request,) = stats.requests
    assert dict(request.steps) == {(3, 3, 1): 39, (3, 3, 2): 1, (3, 3, 4): 3}
    assert request.new_tokens == 54                                   # usage.completion_tokens
    dist = stats.distribution()
    assert dist.mean_tokens == pytest.approx(1.2325581395348837)     # = vLLM's mean_acceptance_length
    assert dist.mean_nodes == 3 and dist.is_chain


def test_vllm_detailed_jsonl_pairs_each_step():
    stats = read_stats(FIXTURES / "vllm_detailed.jsonl")
    assert stats.shape == "per_step_drafted/per_step_accepted" and len(stats.requests) == 2
    first, second = stats.requests
    assert dict(first.steps) == {(3, 3, 4): 2, (2, 2, 1): 1, (2, 2, 3): 1, (3, 3, 2): 1, (3, 3, 3): 1}
    assert [r.new_tokens for r in stats.requests] == [18, 11]
    profile = stats.profile("eagle3", draft_s=0.0015)
    assert profile.label == "eagle3" and profile.draft_s == 0.0015 and profile.request_tokens == ((11, 1.0), (18, 1.0))
    assert profile.steps.mean_tokens == pytest.approx((17 + 10) / 10)   # 10 steps, 17 + 10 tokens by the steps
    assert "drafting priced at 1.50 ms" in profile.notes[0]


def test_sglang_meta_info_with_its_histogram():
    """12 verify steps, 36 proposed (3 a step), accepted 0/1/2/3 drafts in 2/4/2/4 steps."""
    stats = read_stats(FIXTURES / "sglang_generate.json")
    assert stats.engine == "sglang" and stats.shape == "spec_correct_drafts_histogram" and stats.exact
    (request,) = stats.requests
    assert dict(request.steps) == {(3, 3, 1): 2, (3, 3, 2): 4, (3, 3, 3): 2, (3, 3, 4): 4}
    assert stats.distribution().mean_tokens == pytest.approx(32 / 12)   # SGLang's spec_accept_length
    meta = json.loads((FIXTURES / "sglang_generate.json").read_text())["meta_info"]
    older = {k: v for k, v in meta.items() if k not in ("spec_correct_drafts_histogram", "spec_num_proposed_drafts")}
    again = parse_stats(json.dumps({"meta_info": older}), "older")
    assert again.shape == "spec_accept_histogram" and dict(again.requests[0].steps) == dict(request.steps)
    means = {k: v for k, v in older.items() if k != "spec_accept_histogram"}
    by_means = parse_stats(json.dumps(means), "means")                  # meta_info alone, no histogram
    assert not by_means.exact and by_means.distribution().mean_tokens == pytest.approx(32 / 12)


def test_llama_cpp_timings_give_the_means():
    """64 tokens, 80 drafted, 40 accepted: 24 steps (each commits its accepted drafts plus one),
    2.67 tokens and 3.33 draft tokens a step on average."""
    stats = read_stats(FIXTURES / "llama_cpp_completion.json")
    assert stats.engine == "llama.cpp" and not stats.exact
    dist = stats.distribution()
    assert dist.total == pytest.approx(24) and dist.mean_tokens == pytest.approx(64 / 24)
    assert dist.mean_nodes == pytest.approx(80 / 24)      # 3 or 4 nodes, never fewer than 2 accepted
    assert {(n, a) for (n, _, a), _ in dist.weights} == {(3, 2), (3, 3), (4, 2), (4, 3)}
    assert stats.requests[0].new_tokens == 64


def _variant(name: str, edit) -> str:
    data = json.loads((FIXTURES / name).read_text())
    edit(data)
    return json.dumps(data)


def _drop(path: tuple[str, ...], key: str):
    def edit(data):
        for p in path:
            data = data[p]
        del data[key]
    return edit


def _set(path: tuple[str, ...], key: str, value):
    def edit(data):
        for p in path:
            data = data[p]
        data[key] = value
    return edit


SPEC = ("metrics", "speculative_decoding")
CASES = {
    "foreign": ('{"vllm:spec_decode_num_drafts_total": 3}', "not a per-request statistics object of vLLM"),
    "a list of numbers": ("[1, 2]", "response 1: not a per-request statistics object"),
    "vllm null": (_variant("vllm_summary.json", lambda d: d["metrics"].update(speculative_decoding=None)),
                  "metrics.speculative_decoding is null (vLLM fills it only when started with "
                  "--per-request-spec-decode-metrics"),
    "vllm no histogram": (_variant("vllm_summary.json", lambda d: d["metrics"].update(speculative_decoding={"num_spec_steps": 4})),
                          "has no acceptance_histogram"),
    "vllm wrong bucket count": (_variant("vllm_summary.json", _set(SPEC, "acceptance_histogram_by_draft_length", {"3": [1, 2]})),
                                "has 2 buckets; a draft of 3 has 4"),
    "vllm steps disagree": (_variant("vllm_summary.json", _set(SPEC, "num_spec_steps", 40)),
                            "num_spec_steps is 40 but the histogram holds 43 steps"),
    "vllm negative": (_variant("vllm_summary.json", _set(SPEC, "acceptance_histogram_by_draft_length", {"1": [-1, 2]})),
                      "must be a whole number >= 0"),
    "sglang no completion": (_variant("sglang_generate.json", _drop(("meta_info",), "completion_tokens")),
                             "meta_info has no completion_tokens"),
    "sglang histogram sum": (_variant("sglang_generate.json", _set(("meta_info",), "spec_correct_drafts_histogram", [1, 1])),
                             "holds 2 steps but spec_verify_ct is 12"),
    "sglang nothing verified": (_variant("sglang_generate.json", _set(("meta_info",), "spec_verify_ct", 0)),
                                "spec_verify_ct is 0"),
    "llama.cpp no draft": (_variant("llama_cpp_completion.json", _drop(("timings",), "draft_n")),
                           "timings has no draft_n: the server drafted nothing"),
    "llama.cpp impossible": (_variant("llama_cpp_completion.json", _set(("timings",), "draft_n_accepted", 90)),
                             "draft_n_accepted 90 must be at most draft_n 80"),
    "mixed engines": ("\n".join([(FIXTURES / "sglang_generate.json").read_text().replace("\n", ""),
                                 (FIXTURES / "llama_cpp_completion.json").read_text().replace("\n", "")]),
                      "a llama.cpp response in a file of sglang responses"),
    "not json": ("{not json", "not valid JSON"),
    "empty list": ("[]", "holds no responses"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_a_foreign_or_broken_shape_is_refused_in_one_line(name):
    text, words = CASES[name]
    with pytest.raises(StatsFormatError) as err:
        parse_stats(text, "--stats: f.json")
    message = str(err.value)
    assert words in message and message.startswith("--stats: f.json") and "\n" not in message


def test_plan_prices_a_servers_acceptance(tmp_path):
    """`plan --stats` with no bench run: vanilla priced with the same (zero) host costs; --label
    names the drafter, and vLLM's method comes from it."""
    surface = CostSurface((1, 2, 4), (1, 2, 4), ((0.010, 0.011, 0.012), (0.012, 0.014, 0.016), (0.015, 0.02, 0.03)), 64)
    save_surface(surface, tmp_path / "s.json")
    proc = run_cli_here("plan", "--stats", str(FIXTURES / "vllm_summary.json"), "--label", "eagle3",
                        "--surface", str(tmp_path / "s.json"), "--batch-sizes", "1,2,4")
    assert proc.returncode == 0, proc.stderr
    assert "**eagle3** (chain, up to 3 draft tokens" in proc.stdout
    assert '"method": "eagle3"' in proc.stdout and "vllm per-request statistics" in proc.stdout
    assert "43 verify steps, mean acceptance length 1.23" in proc.stderr
    refused = run_cli_here("plan", "--stats", str(FIXTURES / "SOURCES.md"), "--surface", str(tmp_path / "s.json"))
    assert_one_line_refusal(refused, ("--stats: SOURCES.md", "not valid JSON"), alone=False)
    labels = run_cli_here("plan", "--stats", str(FIXTURES / "vllm_summary.json"), "--label", "a", "--label", "b",
                          "--surface", str(tmp_path / "s.json"))
    assert_one_line_refusal(labels, ("--label: 2 labels for 1 --stats files",), alone=False)
