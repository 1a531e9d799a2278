"""import-metrics (specviz/analysis/server_metrics.py, viz/server_metrics.py, cli/import_metrics.py).

The dumps below are written from the engines' own metric definitions and formats:
- vLLM V1: vllm/v1/spec_decode/metrics.py (SpecDecodingStats; SpecDecodingProm registers the
  prometheus_client Counters vllm:spec_decode_num_drafts, ..._num_draft_tokens,
  ..._num_accepted_tokens and ..._num_accepted_tokens_per_pos with a "position" label, 0-based;
  its docstring: mean acceptance length = 1 + accepted / drafts, per-position rate =
  per_pos / drafts). prometheus_client exposes a Counter `x` as `x_total` plus `x_created`.
- vLLM V0: vllm/spec_decode/metrics.py (SpecDecodeWorkerMetrics: draft_acceptance_rate,
  system_efficiency, draft_tokens, emitted_tokens, accepted_tokens, num_spec_tokens) and
  vllm/engine/metrics.py (vllm:spec_decode_draft_acceptance_rate, vllm:spec_decode_efficiency,
  vllm:spec_decode_num_accepted_tokens_total, ..._num_draft_tokens_total, ..._num_emitted_tokens_total).
- SGLang: python/sglang/srt/metrics/collector.py (gauges sglang:spec_accept_length,
  sglang:spec_accept_rate, labelled model_name, engine_type, tp_rank, dp_rank; its
  test/srt/test_metrics.py lists sglang:spec_accept_length among the essential metrics).
"""
from __future__ import annotations

import http.server
import json
import threading
import time

import pytest

from conftest import QuietHandler, run_cli
from specviz.core.decoding import DecodingConfig
from specviz.engine import generate
from specviz.models.prompts import build_prompt
from specviz.analysis.server_metrics import (MetricsImportError, consistent, from_prometheus, from_stats_json,
                                             parse_prometheus, parse_text, read_source, trace_spec_metrics)
from specviz.viz.server_metrics import server_figure

MODEL = 'model_name="meta-llama/Llama-3.1-8B-Instruct"'
VLLM_V1 = f"""# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{engine="0",{MODEL}}} 0.0
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{{engine="0",{MODEL}}} 100.0
# HELP vllm:spec_decode_num_drafts_created Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_created gauge
vllm:spec_decode_num_drafts_created{{engine="0",{MODEL}}} 1.7510e+09
# HELP vllm:spec_decode_num_draft_tokens_total Number of draft tokens.
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{{engine="0",{MODEL}}} 300.0
# HELP vllm:spec_decode_num_accepted_tokens_total Number of accepted tokens.
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{{engine="0",{MODEL}}} 180.0
# HELP vllm:spec_decode_num_accepted_tokens_per_pos_total Accepted tokens per draft position.
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",{MODEL},position="0"}} 80.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",{MODEL},position="1"}} 60.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",{MODEL},position="2"}} 40.0
"""
VLLM_V0 = f"""# TYPE vllm:spec_decode_draft_acceptance_rate gauge
vllm:spec_decode_draft_acceptance_rate{{{MODEL}}} 0.6
# TYPE vllm:spec_decode_efficiency gauge
vllm:spec_decode_efficiency{{{MODEL}}} 0.7
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{{{MODEL}}} 180.0
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{{{MODEL}}} 300.0
# TYPE vllm:spec_decode_num_emitted_tokens_total counter
vllm:spec_decode_num_emitted_tokens_total{{{MODEL}}} 280.0
"""
SGLANG = """# HELP sglang:spec_accept_length The average acceptance length of speculative decoding.
# TYPE sglang:spec_accept_length gauge
sglang:spec_accept_length{dp_rank="0",engine_type="unified",model_name="qwen",tp_rank="0"} 2.5
sglang:spec_accept_length{dp_rank="1",engine_type="unified",model_name="qwen",tp_rank="0"} 2.7
# HELP sglang:spec_accept_rate The average acceptance rate of speculative decoding.
# TYPE sglang:spec_accept_rate gauge
sglang:spec_accept_rate{dp_rank="0",engine_type="unified",model_name="qwen",tp_rank="0"} 0.5
sglang:spec_accept_rate{dp_rank="1",engine_type="unified",model_name="qwen",tp_rank="0"} 0.54
sglang:num_running_reqs{dp_rank="0",engine_type="unified",model_name="qwen",tp_rank="0"} 3.0
"""


def test_vllm_v1_counters():
    m = from_prometheus(VLLM_V1, "dump")
    assert (m.engine, m.shape) == ("vllm", "vllm-v1-prometheus")
    assert m.acceptance_length == pytest.approx(1 + 180 / 100)           # 2.8, the bonus counted
    assert m.acceptance_rate == pytest.approx(180 / 300)
    assert m.per_position == pytest.approx((0.8, 0.6, 0.4))
    assert (m.num_drafts, m.num_draft_tokens, m.num_accepted_tokens) == (100, 300, 180)


def test_vllm_v1_without_total_suffix_and_two_engines_are_summed():
    text = VLLM_V1.replace("_total{", "{") + VLLM_V1.replace('engine="0"', 'engine="1"')
    m = from_prometheus(text)
    assert m.num_drafts == 200 and m.per_position == pytest.approx((0.8, 0.6, 0.4))


def test_vllm_v0_counters_need_k_for_the_length():
    m = from_prometheus(VLLM_V0, "dump")
    assert m.shape == "vllm-v0-prometheus" and m.acceptance_length is None
    assert m.acceptance_rate == pytest.approx(0.6) and "--spec-tokens" in m.notes[0]
    m3 = from_prometheus(VLLM_V0, "dump", spec_tokens=3)
    assert m3.num_drafts == 100 and m3.acceptance_length == pytest.approx(280 / 100)


def test_sglang_gauges_are_averaged_over_ranks():
    m = from_prometheus(SGLANG)
    assert (m.engine, m.shape) == ("sglang", "sglang-prometheus")
    assert m.acceptance_length == pytest.approx(2.6) and m.acceptance_rate == pytest.approx(0.52)
    assert m.per_position == ()


def test_label_values_with_escapes_parse():
    (s,) = parse_prometheus('x{a="q\\"uote",b="c,d"} 1e3 1700000000000\n')
    assert s.labels == (("a", 'q"uote'), ("b", "c,d")) and s.value == 1000.0


def test_vllm_v1_stats_json_list_is_summed():
    stats = [{"num_spec_tokens": 3, "num_drafts": 60, "num_draft_tokens": 180, "num_accepted_tokens": 108,
              "num_accepted_tokens_per_pos": [48, 36, 24]},
             {"num_spec_tokens": 3, "num_drafts": 40, "num_draft_tokens": 120, "num_accepted_tokens": 72,
              "num_accepted_tokens_per_pos": [32, 24, 16]}]
    m = from_stats_json(json.dumps(stats))
    assert m.shape == "vllm-v1-stats" and m.acceptance_length == pytest.approx(2.8)
    assert m.per_position == pytest.approx((0.8, 0.6, 0.4))
    jsonl = "\n".join(json.dumps(s) for s in stats)
    assert from_stats_json(jsonl).to_dict() == m.to_dict()


def test_vllm_v0_worker_metrics_json():
    record = {"draft_acceptance_rate": 0.6, "system_efficiency": 0.7, "draft_tokens": 300,
              "emitted_tokens": 280, "accepted_tokens": 180, "num_spec_tokens": 3}
    m = from_stats_json(json.dumps(record))
    assert m.shape == "vllm-v0-stats" and m.acceptance_length == pytest.approx(2.8)
    assert m.acceptance_rate == pytest.approx(0.6) and m.num_drafts == 100


@pytest.mark.parametrize("text, message", [
    ("# HELP node_cpu_seconds_total x\nnode_cpu_seconds_total{cpu=\"0\"} 12.5\n", r"no vLLM or SGLang .*node_cpu_seconds"),
    (VLLM_V1[:-30], r"line \d+ is not a Prometheus sample .*truncated"),
    (VLLM_V1.replace('position="1"', 'position="7"'), r"no position 1 .*truncated"),
    ("\n".join(line for line in VLLM_V1.splitlines() if "accepted_tokens_total" not in line) + "\n",
     r"without vllm:spec_decode_num_accepted_tokens: the dump looks truncated"),
    (VLLM_V1 + SGLANG, r"mixes vLLM and SGLang"),
    ("", r"is empty"),
    ('{"num_drafts": 3, "num_draft_tokens": 9', r"not valid JSON .*truncated"),
    ('{"requests": 3}', r"none of vLLM's speculative-decoding stats fields"),
    ('{"num_drafts": -1, "num_draft_tokens": 9, "num_accepted_tokens": 1}', r"num_drafts must be a non-negative"),
    # figures that contradict each other, or that no counter can hold
    ("vllm:spec_decode_num_drafts_total 5\nvllm:spec_decode_num_draft_tokens_total 3\n"
     "vllm:spec_decode_num_accepted_tokens_total 9\n", r"more accepted tokens \(9\) than draft tokens \(3\)"),
    ('{"num_drafts": 5, "num_draft_tokens": 3, "num_accepted_tokens": 9}', r"more accepted tokens"),
    ("vllm:spec_decode_num_drafts_total -5\nvllm:spec_decode_num_accepted_tokens_total 1\n",
     r"num_drafts_total is -5; .*finite number >= 0"),
    ("vllm:spec_decode_num_drafts_total 5\nvllm:spec_decode_num_accepted_tokens_total +Inf\n", r"is inf"),
    ("sglang:spec_accept_rate NaN\n", r"is nan"),
    ("sglang:spec_accept_rate 1.7\n", r"acceptance rate of 1.7; a rate is between 0 and 1"),
    ("sglang:spec_accept_length 0.5\n", r"mean acceptance length of 0.5"),
    # a position label far past the others: refused at once (it once built a list up to the label)
    (VLLM_V1.replace('position="1"', 'position="999999999"'), r"position '999999999'; a position is a whole number from 0 to 1023"),
    (VLLM_V1.replace('position="2"', 'position="5"'), r"no position 2 \(positions 0..5"),
    # a series twice (two scrapes pasted together), impossible figures
    (VLLM_V1 + VLLM_V1.splitlines()[-1] + "\n", r"appears twice; .*one scrape at a time"),
    ("vllm:spec_decode_num_drafts_total 100\nvllm:spec_decode_num_draft_tokens_total 50\n"
     "vllm:spec_decode_num_accepted_tokens_total 20\n", r"more drafts \(100\) than draft tokens \(50\)"),
    ('{"num_drafts": 5, "num_draft_tokens": 100, "num_accepted_tokens": 51, "num_accepted_tokens_per_pos": [50, 1]}',
     r"per-position acceptance rate of 10; a rate is between 0 and 1"),
    ('{"num_drafts": 10, "num_draft_tokens": 30, "num_accepted_tokens": 23, "num_accepted_tokens_per_pos": [8, 6, 9]}',
     r"more drafts at position 2 \(0.900\) than at position 1 \(0.600\)"),
    ('{"draft_tokens": 300, "emitted_tokens": 800, "accepted_tokens": 180, "num_spec_tokens": 2}',
     r"mean acceptance length of 5.333, more than a draft of 2 tokens"),
    ('{"num_drafts": 5, "num_draft_tokens": 10, "num_accepted_tokens": 4, "num_accepted_tokens_per_pos": [-3, 1]}',
     r"num_accepted_tokens_per_pos\[0\] must be a non-negative number, got -3"),
    ("[]", r"an empty list"),
    ('[{"num_drafts": 1}, 3]', r"record 1 is a int, not a JSON object"),
    ("[" * 100_000 + "]" * 100_000, r"nested deeper than 64 levels"),
])
def test_foreign_or_truncated_input_is_one_clear_error(tmp_path, text, message):
    path = tmp_path / "dump.txt"
    path.write_text(text)
    with pytest.raises(MetricsImportError, match=message) as err:
        read_source(str(path))
    assert "\n" not in str(err.value)


# --- a URL, served on 127.0.0.1 only --------------------------------------------------------------

class _Handler(QuietHandler):
    def do_GET(self) -> None:  # noqa: N802 - the http.server name
        if self.path == "/slow":
            time.sleep(1.5)
        if self.path not in ("/metrics", "/slow"):
            self.send_error(404)
            return
        self.send_body(SGLANG.encode(), "text/plain; version=0.0.4")


@pytest.fixture
def server():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_metrics_url(server):
    m = read_source(f"{server}/metrics")
    assert m.engine == "sglang" and m.acceptance_length == pytest.approx(2.6)
    with pytest.raises(MetricsImportError, match="answered HTTP 404"):
        read_source(f"{server}/nothing")
    with pytest.raises(MetricsImportError, match=r"did not answer in full within 0.3 s \(a limit on the whole fetch"):
        read_source(f"{server}/slow", timeout=0.3)


def test_a_closed_port_is_a_clear_error(server):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(MetricsImportError, match="could not read"):
        read_source(f"http://127.0.0.1:{port}/metrics", timeout=2)


# --- beside a specviz run --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def trace(tiny_lm_tok):
    prompt = build_prompt(tiny_lm_tok.tokenizer, "the cat sat on the mat. the cat sat on the mat. the cat")
    return generate(tiny_lm_tok, prompt, "prompt_lookup", None, DecodingConfig(max_new_tokens=32))


def test_a_trace_counted_as_vllm_counts(trace):
    m = trace_spec_metrics(trace)
    drafted = [s for s in trace.steps if len(s.tree)]
    assert drafted and m.num_drafts == len(drafted)
    accepted = [len(s.accepted) for s in drafted]
    assert m.acceptance_length == pytest.approx(1 + sum(accepted) / len(drafted))
    assert m.acceptance_rate == pytest.approx(sum(accepted) / sum(len(s.tree) for s in drafted))
    assert m.per_position[0] == pytest.approx(sum(a >= 1 for a in accepted) / len(drafted))
    assert list(m.per_position) == sorted(m.per_position, reverse=True)       # a chain: non-increasing


def test_figure_draws_server_and_run(trace):
    items = [from_prometheus(VLLM_V1, "vllm dump"), from_prometheus(SGLANG, "sglang dump"), trace_spec_metrics(trace)]
    fig = server_figure(items)
    bars = [t for t in fig.data if t.type == "bar"]
    lines = [t for t in fig.data if t.type == "scatter"]
    assert [b.y[0] for b in bars] == pytest.approx([2.8, 2.6, items[2].acceptance_length])   # a bar per source
    assert len({b.marker.color for b in bars}) == 3 and all(b.name for b in bars)         # each its colour, named
    assert len(lines) == 2 and list(lines[0].y) == pytest.approx([0.8, 0.6, 0.4])   # SGLang has no positions
    assert list(lines[0].x) == [0, 1, 2] and lines[0].line.color == bars[0].marker.color   # numbered from 0, as vLLM


def test_cli_prints_and_draws(tmp_path, trace):
    dump = tmp_path / "vllm.txt"
    dump.write_text(VLLM_V1)
    tfile = tmp_path / "run.json"
    tfile.write_text(trace.to_json())
    html = tmp_path / "cmp.html"
    done = run_cli("import-metrics", str(dump), "--trace", str(tfile), "--html", str(html), "--json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert [o["engine"] for o in out] == ["vllm", "specviz"] and out[0]["acceptance_length"] == pytest.approx(2.8)
    assert html.is_file() and "plotly" in html.read_text()[:5000].lower()
    table = run_cli("import-metrics", str(dump))
    assert table.returncode == 0 and "2.800" in table.stdout


def test_cli_foreign_dump_is_one_line(tmp_path):
    dump = tmp_path / "node.txt"
    dump.write_text('node_load1 0.5\n')
    done = run_cli("import-metrics", str(dump))
    assert done.returncode == 2
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "no vLLM or SGLang" in lines[0], done.stderr


# --- the explorer's tab ---------------------------------------------------------------------------

def test_explorer_tab_draws_an_upload_beside_the_session_run(tmp_path, trace):
    import gradio as gr

    from specviz.ui.server_metrics_tab import draw_server_metrics
    from specviz.ui.session import Session

    dump = tmp_path / "vllm.txt"
    dump.write_text(VLLM_V1)
    table, fig = draw_server_metrics(Session(trace=trace), str(dump), "", None)
    assert "2.800" in table and "specviz" in table
    assert len([t for t in fig.data if t.type == "scatter"]) == 2
    assert "vllm.txt" in table and str(tmp_path) not in table          # the file's own name, not its path
    with pytest.raises(gr.Error, match="upload a dump or give a /metrics URL"):
        draw_server_metrics(Session(), None, "", None)


def test_explorer_tab_shows_the_sources_names_as_written(tmp_path, trace):
    """The summary is a code block no source name can close (an uploaded trace's model id is
    the session run's name; markup.md_block), the figure's labels plotly text (plot_text); the
    k box is text (gradio's number box sent 0 when empty): blank is no k."""
    import dataclasses

    from specviz.ui.server_metrics_tab import draw_server_metrics, spec_tokens_of
    from specviz.ui.session import Session
    from specviz.viz.markup import plot_text

    dump = tmp_path / "&lt;b&gt;.txt"
    dump.write_text(VLLM_V1)
    hostile = dataclasses.replace(trace, model_id="m\n````\n<b>bold</b>")
    table, fig = draw_server_metrics(Session(trace=hostile), str(dump), "", "  ")
    fence = table.splitlines()[0]
    assert fence == "`````text" and table.endswith("\n`````") and table.count("`````") == 2
    assert "````\n<b>bold</b>" in table and "&lt;b&gt;.txt" in table
    labels = [t.name for t in fig.data]
    assert any(plot_text("<b>bold</b>") in n for n in labels) and any(plot_text("&lt;b&gt;.txt") in n for n in labels)
    assert spec_tokens_of("") is None and spec_tokens_of(" 4 ") == 4


def test_explorer_tab_reads_only_allowed_hosts(server, monkeypatch):
    """No URL by default (on a Space or not: any port of the machine could be read); the owner's
    list names hosts (a loopback address only as an address or as localhost)."""
    import gradio as gr

    from specviz.ui.server_metrics_tab import draw_server_metrics
    from specviz.ui.session import Session

    monkeypatch.delenv("SPECVIZ_METRICS_HOSTS", raising=False)
    monkeypatch.delenv("SPACE_ID", raising=False)
    with pytest.raises(gr.Error, match="reads no /metrics URL .*SPECVIZ_METRICS_HOSTS.*upload the dump"):
        draw_server_metrics(Session(), None, f"{server}/metrics", None)
    monkeypatch.setenv("SPECVIZ_METRICS_HOSTS", "127.0.0.1")
    assert "sglang" in draw_server_metrics(Session(), None, f"{server}/metrics", None)[0]
    with pytest.raises(gr.Error, match="only from 127.0.0.1; .*upload the dump"):
        draw_server_metrics(Session(), None, "http://10.0.0.5:8000/metrics", None)
    with pytest.raises(gr.Error, match="not an http"):
        draw_server_metrics(Session(), None, "/etc/passwd", None)


def test_per_position_counts_that_miss_the_accepted_counter_are_noted():
    text = '{"num_drafts": 10, "num_draft_tokens": 30, "num_accepted_tokens": 20, "num_accepted_tokens_per_pos": [8, 6, 2]}'
    m = consistent(from_stats_json(text))
    assert any("sum to 16 accepted tokens, the accepted counter says 20" in n for n in m.notes), m.notes


def test_a_k_larger_than_the_draft_tokens_is_refused():
    dump = ("vllm:spec_decode_num_draft_tokens_total 300\nvllm:spec_decode_num_accepted_tokens_total 180\n"
            "vllm:spec_decode_num_emitted_tokens_total 280\n")
    assert parse_text(dump, "v0.txt", spec_tokens=3).acceptance_length == pytest.approx(2.8)
    with pytest.raises(MetricsImportError, match=r"is k \(--spec-tokens\) the server's num_speculative_tokens"):
        parse_text(dump, "v0.txt", spec_tokens=99_999_999_999)


@pytest.mark.parametrize("value", ["nan", "inf", "0", "-1", "86401"])
def test_cli_timeout_must_be_a_finite_positive_number(value, capsys):
    from specviz.cli import main
    assert main(["import-metrics", "http://127.0.0.1:9/metrics", "--timeout", value]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--timeout: must be a number of seconds above 0" in err, err


@pytest.mark.parametrize("value", [float("nan"), 0, 2.5, "x", "\u0665", "\u00b2", "1e300", 1e300, 10**400, "9" * 5000])
def test_the_web_k_box_takes_whole_numbers_only(value):
    from specviz.ui.server_metrics_tab import spec_tokens_of
    with pytest.raises(MetricsImportError, match="k: must be a whole number from 1 to 1024"):
        spec_tokens_of(value)
    assert spec_tokens_of(3.0) == 3 and spec_tokens_of(None) is None


def test_a_k_given_for_a_v1_dump_is_said_to_be_unused():
    """V1 counts its drafts: --spec-tokens changes nothing there, and the output says so."""
    plain, given = parse_text(VLLM_V1, "v1.txt"), parse_text(VLLM_V1, "v1.txt", spec_tokens=3)
    assert given.acceptance_length == plain.acceptance_length and not plain.notes
    assert given.notes == ("k = 3 (--spec-tokens) is not used: vLLM V1 counts its drafts",)
