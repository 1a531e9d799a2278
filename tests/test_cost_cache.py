"""The forward-cost curve kept on disk per machine (specviz/models/cost_cache.py): a fresh curve
is reused by the next process, a stale one, another key's, a damaged file or `retime` is timed
again; several processes asking at once time it once; a read-only store still runs; a loaded
model's curve and a Trace say which curve they are."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from specviz.models import cost_cache, load_model, loading
from specviz.models.cost import VerifyCost
from specviz.models.cost_cache import MAX_AGE_S, curve_key, kept_curve

KEY = curve_key("abc123", torch.device("cpu"), torch.float32, True, "sdpa")


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(cost_cache.STORE_ENV, str(tmp_path / "curves"))
    monkeypatch.setattr(cost_cache, "machine_load", lambda device: None)    # the tests' own load: not asked
    return tmp_path / "curves"


class Timer:
    """A stand-in for cost.calibrate that counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> VerifyCost:
        self.calls += 1
        return VerifyCost((1, 2, 4), (0.01 * self.calls, 0.015, 0.02))


def test_a_fresh_curve_is_read_back_with_its_age(store: Path) -> None:
    timer = Timer()
    first = kept_curve(KEY, timer, now=lambda: 1000.0)
    assert timer.calls == 1 and first.stamp is not None and first.stamp.source == "timed"
    again = kept_curve(KEY, timer, now=lambda: 1000.0 + 3600)
    assert timer.calls == 1 and again.seconds == first.seconds and again.sizes == first.sizes
    assert again.stamp is not None and again.stamp.source == "disk" and again.stamp.age(1000.0 + 3600) == 3600
    described = again.described(now=1000.0 + 3600)
    assert described["source"] == "disk" and described["age_s"] == 3600 and described["key"].startswith("abc123/cpu:")
    assert described["measured_at"] == "1970-01-01T00:16:40+00:00"
    assert len(list(store.glob("*.json"))) == 1


def test_a_curve_timed_on_a_busy_cpu_is_trusted_for_an_hour_only(store: Path) -> None:
    timer = Timer()
    kept_curve(KEY, timer, now=lambda: 0.0, load=lambda: 3.5)              # 3.5 runnable threads a core
    assert json.loads(next(store.glob("*.json")).read_text())["load"] == 3.5
    assert kept_curve(KEY, timer, now=lambda: 3600.0, load=lambda: 0.2).stamp.source == "disk"
    assert timer.calls == 1
    again = kept_curve(KEY, timer, now=lambda: 3601.0, load=lambda: 0.2)  # an hour and a second: timed again
    assert timer.calls == 2 and again.stamp.source == "timed"
    # the quiet timing is kept for the week
    assert kept_curve(KEY, timer, now=lambda: 3601.0 + MAX_AGE_S - 1, load=lambda: 0.2).stamp.source == "disk"
    assert timer.calls == 2
    assert cost_cache.BUSY_LOAD < 3.5 and cost_cache.BUSY_MAX_AGE_S == 3600


def test_a_curve_is_keyed_by_the_openmp_settings(store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """OMP_WAIT_POLICY=passive makes small forwards slower on a CPU: a curve timed without it is
    not reused under it (nor the other way), and the key's text says which."""
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    plain = curve_key("abc123", torch.device("cpu"), torch.float32, True, "sdpa")
    monkeypatch.setenv("OMP_WAIT_POLICY", "passive")
    passive = curve_key("abc123", torch.device("cpu"), torch.float32, True, "sdpa")
    assert passive != plain and passive["threading_env"]["OMP_WAIT_POLICY"] == "passive"
    assert "/OMP_WAIT_POLICY=passive/" in cost_cache.key_text(passive)
    monkeypatch.setattr(cost_cache, "processor_name", lambda device: "a GPU")       # no GPU here
    assert curve_key("abc123", torch.device("cuda"), torch.float32, False, "sdpa")["threading_env"] == {}
    timer = Timer()
    kept_curve(plain, timer)
    kept_curve(passive, timer)
    assert timer.calls == 2                                  # timed under each


def test_machine_load_is_a_cpus_only() -> None:
    assert cost_cache.machine_load("cuda") is None
    load = cost_cache.machine_load("cpu")
    assert load is None or load >= 0


def test_a_stale_curve_another_key_a_damaged_file_and_retime_are_timed_again(store: Path) -> None:
    timer = Timer()
    kept_curve(KEY, timer, now=lambda: 0.0)
    kept_curve(KEY, timer, now=lambda: MAX_AGE_S + 1.0)                  # a week and a second: stale
    assert timer.calls == 2
    kept_curve(KEY, timer, now=lambda: MAX_AGE_S + 2.0)                  # the one just timed is fresh
    assert timer.calls == 2
    kept_curve({**KEY, "threads": KEY["threads"] + 1}, timer, now=lambda: MAX_AGE_S + 2.0)
    assert timer.calls == 3                                               # another thread count: its own curve
    kept_curve(KEY, timer, retime=True, now=lambda: MAX_AGE_S + 3.0)
    assert timer.calls == 4
    for path in store.glob("*.json"):
        path.write_text("{not json", encoding="utf-8")
    fixed = kept_curve(KEY, timer, now=lambda: MAX_AGE_S + 4.0)
    assert timer.calls == 5 and fixed.stamp is not None and fixed.stamp.source == "timed"
    assert kept_curve(KEY, timer, now=lambda: MAX_AGE_S + 5.0).stamp.source == "disk"   # rewritten whole


def test_a_file_of_another_key_or_with_bad_values_is_not_used(store: Path) -> None:
    timer = Timer()
    kept_curve(KEY, timer, now=lambda: 0.0)
    (path,) = store.glob("*.json")
    data = json.loads(path.read_text(encoding="utf-8"))
    for bad in ({**data, "key": {**KEY, "model": "other"}}, {**data, "seconds": [0.1, -1.0, 0.2]},
                {**data, "sizes": [4, 2, 1]}, {**data, "format": 99}, {**data, "seconds": "x"}):
        path.write_text(json.dumps(bad), encoding="utf-8")
        assert cost_cache.read(path, KEY) is None


def test_a_read_only_store_times_in_memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("not a folder", encoding="utf-8")
    monkeypatch.setenv(cost_cache.STORE_ENV, str(blocked / "curves"))    # cannot be made
    timer = Timer()
    assert kept_curve(KEY, timer).stamp.source == "timed" and kept_curve(KEY, timer).stamp.source == "timed"
    assert timer.calls == 2
    monkeypatch.setenv(cost_cache.STORE_ENV, "off")
    assert cost_cache.store_dir() is None and kept_curve(KEY, timer).stamp.source == "timed"


def test_processes_asking_at_once_time_the_curve_once(store: Path, tmp_path: Path) -> None:
    """Three processes start together; the timing (slow here) runs in one of them, the others wait
    for its lock and read its curve."""
    log = tmp_path / "timings.log"
    script = textwrap.dedent(f"""
        import time, torch
        from specviz.models.cost import VerifyCost
        from specviz.models.cost_cache import curve_key, kept_curve
        key = curve_key("abc123", torch.device("cpu"), torch.float32, True, "sdpa")
        def slow():
            with open({str(log)!r}, "a") as f:
                f.write("timed\\n")
            time.sleep(1.5)
            return VerifyCost((1, 2), (0.01, 0.02))
        print(kept_curve(key, slow).stamp.measured_at)
    """)
    env = {**os.environ, cost_cache.STORE_ENV: str(store), "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    procs = [subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, text=True)
             for _ in range(3)]
    stamps = [p.communicate(timeout=300)[0].strip() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert log.read_text().count("timed") == 1
    assert len(set(stamps)) == 1, stamps                                  # one curve, measured once


def test_a_loaded_model_reuses_this_machines_curve(store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loading, "_COSTS", loading.weakref.WeakKeyDictionary())
    monkeypatch.setattr(loading, "_TIMED", {})
    monkeypatch.setattr(loading, "_CACHE", {})
    lm = load_model("tiny-random", "cpu", "float32")
    timed = lm.cost_model()
    assert timed.stamp is not None and timed.stamp.source == "timed"
    # a new process's load: nothing in memory, the curve from the store, not timed again
    monkeypatch.setattr(loading, "_COSTS", loading.weakref.WeakKeyDictionary())
    monkeypatch.setattr(loading, "calibrate", lambda model: pytest.fail("timed again"))
    again = lm.cost_model()
    assert again.stamp is not None and again.stamp.source == "disk" and again.seconds == timed.seconds
    key = lm.curve_key()
    assert key["dtype"] == "float32" and key["cpu_linear"] is True and key["threads"] == torch.get_num_threads()
    # --retime: timed again now, and kept
    monkeypatch.setattr(loading, "calibrate", lambda model: VerifyCost((1, 2), (0.5, 0.6)))
    fresh = load_model("tiny-random", "cpu", "float32", retime_cost=True).cost_model()
    assert fresh.stamp is not None and fresh.stamp.source == "timed" and fresh.seconds == (0.5, 0.6)
    monkeypatch.setattr(loading, "_COSTS", loading.weakref.WeakKeyDictionary())
    assert lm.cost_model().seconds == (0.5, 0.6)


def test_the_trace_names_the_curve_that_sized_its_drafts(store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from specviz.core.trace import Trace
    from specviz.engine import generate

    monkeypatch.setattr(loading, "_COSTS", loading.weakref.WeakKeyDictionary())
    monkeypatch.setattr(loading, "_TIMED", {})
    lm = load_model("tiny-random", "cpu", "float32")
    trace = generate(lm, [5, 6, 7, 5, 6], "ngram_trie", None, {"max_new_tokens": 4})
    assert trace.cost_curve is not None and trace.cost_curve["source"] in ("timed", "disk")
    assert trace.cost_curve["key"] == cost_cache.key_text(lm.curve_key()) and trace.cost_curve["age_s"] >= 0
    back = Trace.from_json(trace.to_json())
    assert back.cost_curve == trace.cost_curve
