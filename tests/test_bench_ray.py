"""`specviz bench --ray`: the questions shared out to Ray workers (specviz/bench/cluster.py).

On a local Ray cluster (2 CPUs, 2 workers, the tiny random model): the merged results equal a
serial run's outputs token for token; a worker killed mid-run loses no finished question and
`--resume` measures the rest; without Ray, `--ray` is refused with the install command.
The Ray tests skip when Ray is missing on a developer's machine; in CI (CI=true) they run
(requirements-dev.txt installs Ray).
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from specviz.bench.cluster import INSTALL, ClusterError, hardware_warning, worker_shape
from specviz.bench.metrics import Run
from specviz.bench.report import load_results
from specviz.cli import main

try:
    import ray
except ImportError:
    ray = None

needs_ray = pytest.mark.skipif(
    ray is None and os.environ.get("CI") != "true",
    reason=f"Ray is not installed ({INSTALL}); CI runs these tests (requirements-dev.txt has Ray)")

Q = [json.dumps({"question_id": i, "category": "qa", "turns": [f"Tell me about the town number {i} and its river."]})
     for i in range(1, 5)] + \
    [json.dumps({"question_id": 9, "category": "writing", "turns": ["Write a short poem.", "Now a shorter one."]})]


def _bench(tmp_path: Path, out: Path, *extra: str) -> int:
    questions = tmp_path / "q.jsonl"
    questions.write_text("\n".join(Q) + "\n", encoding="utf-8")
    return main(["bench", "--model", "tiny-random", "--device", "cpu", "--questions", str(questions),
                 "--categories", "qa,writing", "--limit", "4", "--max-new-tokens", "8", "--warmup", "0",
                 "--drafters", "vanilla,ngram_trie,oracle", "--peers", "", "--out", str(out), *extra])


def _outputs(out: Path) -> dict[tuple[int, int, str, int], list[int]]:
    data = json.loads((out / "results.json").read_text())
    return {(r["question_id"], r["turn"], r["method"], r["repeat"]): r["output_ids"] for r in data["runs"]}


@pytest.fixture(scope="module")
def cluster():
    """A local Ray cluster of 2 CPUs with a small object store, shared by this module's tests
    (`--ray auto` joins it)."""
    ray.init(num_cpus=2, object_store_memory=80 * 2**20, include_dashboard=False,
             logging_level="WARNING", log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def serial(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("serial")
    assert _bench(tmp, tmp / "out") == 0
    return _outputs(tmp / "out")


@needs_ray
def test_ray_run_equals_the_serial_run_token_for_token(cluster, serial, tmp_path, capsys):
    out = tmp_path / "out"
    assert _bench(tmp_path, out, "--ray", "auto", "--ray-workers", "2") == 0
    assert _outputs(out) == serial                          # every question, method, turn: same tokens
    meta, rows = load_results(out / "results.json")
    assert meta["questions_measured"] == 5 and meta["interrupted"] is False
    assert meta["ray"]["workers"] == 2 and meta["sittings"][0]["ray"] == "auto"
    data = json.loads((out / "results.json").read_text())
    workers = {(r["worker"]["host"], r["worker"]["pid"]) for r in data["runs"]}
    assert len(workers) == 2                                # both workers measured questions
    for q in {r["question_id"] for r in data["runs"]}:      # a question is measured whole on one worker
        assert len({r["worker"]["pid"] for r in data["runs"] if r["question_id"] == q}) == 1
    assert all(r["worker"]["device"] == "cpu" and r["worker"]["cpu"] for r in data["runs"])
    assert "hardware_warning" not in meta                   # one machine: no warning
    by = {(r["category"], r["method"]): r for r in rows}
    assert by[("all", "ngram_trie")]["identical_to_vanilla"] == "6/6"
    for name in ("summary.csv", "summary.md", "report.html"):
        assert (out / name).stat().st_size > 0


@needs_ray
def test_a_killed_worker_loses_no_finished_question_and_resume_completes(cluster, serial, tmp_path,
                                                                         monkeypatch, capsys):
    from specviz.bench import cluster as cluster_module

    real = cluster_module.ClusterBench.submit
    submitted: list[int] = []

    def kill_the_second(self, actor, job):               # the worker of the 2nd question dies mid-run
        future = real(self, actor, job)
        submitted.append(job[0].question_id)
        if len(submitted) == 2:
            ray.kill(actor)
        return future

    monkeypatch.setattr(cluster_module.ClusterBench, "submit", kill_the_second)
    out = tmp_path / "out"
    assert _bench(tmp_path, out, "--ray", "auto", "--ray-workers", "2") == 130
    assert "--resume" in capsys.readouterr().err
    meta, _ = load_results(out / "results.json")
    assert meta["interrupted"] is True and meta["stop_reason"] == "a worker was lost" and meta["ray"]["lost"]
    first = json.loads((out / "results.json").read_text())["runs"]
    kept = {r["question_id"] for r in first}
    assert kept and submitted[1] not in kept               # the finished questions are saved, the lost one not
    assert meta["questions_measured"] == len(kept)

    monkeypatch.setattr(cluster_module.ClusterBench, "submit", real)
    submitted.clear()
    resumed: list[int] = []
    monkeypatch.setattr(cluster_module.ClusterBench, "submit",
                        lambda self, actor, job: (resumed.append(job[0].question_id), real(self, actor, job))[1])
    assert _bench(tmp_path, out, "--ray", "auto", "--ray-workers", "2", "--resume") == 0
    assert not kept & set(resumed) and kept | set(resumed) == {1, 2, 3, 4, 9}   # each question once
    assert _outputs(out) == serial
    data = json.loads((out / "results.json").read_text())
    assert [r for r in data["runs"] if r["question_id"] in kept] == first      # kept as measured
    meta, _ = load_results(out / "results.json")
    assert meta["questions_measured"] == 5 and meta["interrupted"] is False
    assert [s["questions"] for s in meta["sittings"]] == [len(kept), 5 - len(kept)]


def test_ray_missing_is_refused_with_the_install_command(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)           # `import ray` raises ImportError
    assert _bench(tmp_path, tmp_path / "out", "--ray", "auto") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--ray" in err[0] and INSTALL in err[0], err
    assert not (tmp_path / "out" / "results.json").exists()


def _run(qid: int, host: str, cpu: str, gpu: str | None = None, threads: int = 4) -> Run:
    return Run(qid, "qa", 0, "vanilla", 0, 5, 1.0, 5, worker={"host": host, "pid": 1, "device": "cuda:0" if gpu else "cpu",
                                                            "cpu": cpu, "gpu": gpu, "torch_threads": threads})


def test_hardware_warning_names_the_workers_that_differ():
    alike = [_run(1, "a", "EPYC"), _run(2, "b", "EPYC")]
    assert hardware_warning(alike) is None
    assert hardware_warning([Run(1, "qa", 0, "vanilla", 0, 5, 1.0, 5)]) is None     # older results
    warning = hardware_warning(alike + [_run(3, "c", "EPYC", gpu="NVIDIA H100")])
    assert warning and "NVIDIA H100" in warning and "EPYC" in warning and "on c" in warning
    assert hardware_warning([_run(1, "a", "EPYC", threads=1), _run(2, "b", "EPYC", threads=8)])
    passive = _run(2, "b", "EPYC")
    passive.worker["threading_env"] = {"OMP_WAIT_POLICY": "passive"}                  # threads that sleep
    warning = hardware_warning([_run(1, "a", "EPYC"), passive])
    assert warning and "OMP_WAIT_POLICY=passive) on b" in warning


def test_worker_shape_one_per_gpu_or_per_node():
    def node(cpus: float, gpus: float = 0) -> dict:
        return {"Alive": True, "Resources": {"CPU": cpus, "GPU": gpus}}
    assert worker_shape({"CPU": 32, "GPU": 4}, [node(16, 2), node(16, 2)], None, True) == (4, 1, 1)
    assert worker_shape({"CPU": 24}, [node(16), node(8)], None, False) == (2, 8, 0)   # the smaller node's CPUs
    assert worker_shape({"CPU": 2}, [node(2)], 2, False) == (2, 1, 0)
    with pytest.raises(ClusterError, match="GPU"):
        worker_shape({"CPU": 32, "GPU": 1}, [node(32, 1)], 2, True)
    with pytest.raises(ClusterError, match="--ray-workers"):
        worker_shape({"CPU": 2}, [node(2)], 3, False)


@pytest.mark.parametrize("argv, words", [
    (["--ray-workers", "2"], "--ray-workers: needs --ray"),
    (["--ray", "auto", "--ray-workers", "0"], "--ray-workers: must be >= 1"),
])
def test_bad_ray_flags_exit_2_with_one_line(tmp_path, argv, words, capsys):
    assert _bench(tmp_path, tmp_path / "out", *argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0], err


@needs_ray
@pytest.mark.parametrize("address, words", [
    ("127.0.0.1:1", "nothing answers at 127.0.0.1:1"),
    ("nonsense", "expected HOST:PORT"),
])
def test_an_unreachable_head_is_refused_in_seconds(tmp_path, address, words, capsys):
    assert _bench(tmp_path, tmp_path / "out", "--ray", address) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0], err


@needs_ray
def test_a_port_that_is_no_ray_head_is_refused_in_seconds(tmp_path, capsys):
    """An HTTP server at the address: Ray retried it for minutes, printing its own warnings."""
    import http.server
    import threading
    import time

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):            # its log would share stderr with the refusal
            pass
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        start = time.monotonic()
        assert _bench(tmp_path, tmp_path / "out", "--ray", f"127.0.0.1:{server.server_port}") == 2
        assert time.monotonic() - start < 30
    finally:
        server.shutdown()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "but not a Ray head (it does not speak gRPC)" in err[0], err


@needs_ray
def test_a_ray_heads_address_passes_the_check(cluster):
    """The check must let a real head through: the test cluster's GCS answers HTTP/2."""
    import ray

    from specviz.bench.cluster import _check_reachable
    _check_reachable(ray.get_runtime_context().gcs_address)
