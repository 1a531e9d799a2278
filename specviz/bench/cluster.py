"""Spread a benchmark's questions over a Ray cluster (`specviz bench --ray ADDRESS|auto`).

Each worker is a Ray actor that loads the target once, warms up, then measures whole
questions with `Bench.question_runs`, the unit of work of the serial run: every method of a
question back to back, interleaved, on one machine, so a question's speedups stay
same-machine ratios. Ray's ActorPool hands the next question to whichever worker is free
(Ray places the workers: one per GPU, or one per node on CPUs, unless `--ray-workers`).
Each finished question comes back to the driver, which saves results.json after it as the
serial run does. A worker lost mid-run (a node gone, a process killed) loses only the
question it was measuring: the run stops once the questions in flight on the other workers
are in, and `--resume` measures the rest (a question counts once, whichever worker measured
it). Every run records its worker (`worker_info`: host, device, CPU/GPU model);
`hardware_warning` names the differences when the workers are not alike.

A drafter that keeps state across questions (drafters.store.DrafterStore) keeps it per
worker, as a resumed serial run starts afresh: outputs are unchanged (lossless), acceptance
of such a drafter may differ from one long serial run.

Ray is optional (`pip install 'specviz-decoding[cluster]'`); it is imported in functions only.
"""
from __future__ import annotations

import math
import os
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

import torch

from ..errors import SpecvizError
from ..files.user_values import ascii_int
from ..models import LoadedModel
from ..models.cost_cache import cpu_model, threading_env   # the CPU's name, OpenMP settings (the curve's key has both)
from .methods import Method
from .metrics import Run
from .questions import Question
from .runner import Bench, Measured

if TYPE_CHECKING:
    from tqdm import tqdm
    from transformers import PreTrainedTokenizerBase

INSTALL = "pip install 'specviz-decoding[cluster]'"
# what loads the target (and hf_assisted's draft model) on a worker; picklable (Ray ships it)
Loader = Callable[[], tuple[LoadedModel, LoadedModel | None]]


class ClusterError(SpecvizError):
    """Ray is missing, the cluster cannot be reached, or it cannot hold the workers."""


def import_ray() -> Any:
    """The ray module, or a ClusterError naming the install command."""
    try:
        import ray
    except ImportError:
        raise ClusterError(f"--ray: Ray is not installed; install it with {INSTALL}") from None
    return ray


def worker_info(device: torch.device) -> dict[str, Any]:
    """Where runs are measured: host, process id (tells the workers of one host apart), device,
    CPU model, GPU model (None on CPUs), torch threads and the OpenMP / MKL environment."""
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    return {"host": socket.gethostname(), "pid": os.getpid(), "device": str(device), "cpu": cpu_model(),
            "gpu": gpu, "torch_threads": torch.get_num_threads(), "threading_env": threading_env()}


def hardware_warning(runs: Sequence[Run]) -> str | None:
    """A warning when the runs were measured on workers of different hardware (CPU or GPU
    model, device type, threads, OpenMP / MKL settings), naming each kind and its hosts; None when
    all alike."""
    kinds: dict[tuple[Any, ...], set[str]] = {}
    for r in runs:
        w = r.worker
        if w:
            env = " ".join(f"{k}={v}" for k, v in sorted((w.get("threading_env") or {}).items()))
            key = (w.get("gpu") or w.get("cpu"), str(w.get("device", "")).split(":")[0], w.get("torch_threads"), env)
            kinds.setdefault(key, set()).add(str(w.get("host")))
    if len(kinds) < 2:
        return None
    parts = [f"{model} ({device}, {threads} threads{', ' + env if env else ''}) on {', '.join(sorted(hosts))}"
             for (model, device, threads, env), hosts in sorted(kinds.items(), key=str)]
    return ("workers differ in hardware: " + "; ".join(parts) + ". Each question's speedups are "
            "measured on one worker, but tokens/s and seconds mix machines")


@dataclass(frozen=True)
class Target:
    """What the driver needs of the target a worker loaded (meta data, the export's tokenizer)."""
    model_id: str
    dtype: torch.dtype
    device: torch.device
    runtime: dict[str, Any]
    tokenizer: PreTrainedTokenizerBase
    worker: dict[str, Any]


class BenchWorker:
    """The Ray actor's class: one target, loaded once, measuring whole questions."""

    def __init__(self) -> None:
        self.bench: Bench | None = None

    def start(self, load: Loader, methods: list[Method], max_new_tokens: int, threads: int) -> Target:
        torch.set_num_threads(threads)             # the CPUs Ray reserved for this worker
        lm, assistant = load()
        self.bench = Bench(lm, methods, max_new_tokens, assistant, worker=worker_info(lm.device))
        return Target(lm.model_id, lm.dtype, lm.device, lm.runtime, lm.tokenizer, self.bench.worker or {})

    def warm_up(self, questions: list[Question], warmup: int) -> None:
        assert self.bench is not None
        self.bench.warm_up(questions, warmup)

    def measure(self, q: Question, repeats: int) -> tuple[int, list[Run], str | None]:
        assert self.bench is not None
        runs, skipped = self.bench.question_runs(q, repeats)
        return q.question_id, runs, skipped


def _worker_env() -> dict[str, Any]:
    """The runtime_env of the workers: a specviz imported from a checkout (not installed) is put
    on their PYTHONPATH, so workers on this machine run the same code as the driver."""
    import specviz
    root = Path(specviz.__file__).resolve().parent.parent
    if any(part in ("site-packages", "dist-packages") for part in root.parts):
        return {}
    path = os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH", "")) if p)
    return {"env_vars": {"PYTHONPATH": path}}


def connect(address: str) -> bool:
    """Join the cluster: 'auto' = the one this machine belongs to (RAY_ADDRESS, or `ray start`
    here), else a new local one; HOST:PORT = that head node. True if this call started Ray
    (the run shuts it down at the end); an already initialised Ray is used as it is."""
    ray = import_ray()
    check_address(address)
    if address != "auto":
        _check_reachable(address)
    elif os.environ.get("RAY_ADDRESS", "").strip() not in ("", "auto", "local"):
        _check_reachable(os.environ["RAY_ADDRESS"].strip(), via="RAY_ADDRESS")   # what 'auto' would join
    if ray.is_initialized():
        return False
    try:
        ray.init(address=None if address == "auto" else address, include_dashboard=False,
                 logging_level="WARNING", log_to_driver=False)
    except (ConnectionError, RuntimeError, ValueError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ClusterError(f"--ray: cannot join the Ray cluster at {address!r} ({first}); start one "
                           "with `ray start --head`, or give --ray auto for a local one") from None
    return True


def check_address(address: str | None) -> None:
    """ClusterError unless `address` is 'auto' or HOST:PORT (ray://HOST:PORT), the port in
    ASCII digits from 1 to 65535: an empty --ray is no request to run serially."""
    if address is None or address.strip() == "auto":
        return
    _host_port(address, "--ray")


def _host_port(address: str, via: str) -> tuple[str, int]:
    host, sep, port_text = address.strip().removeprefix("ray://").rpartition(":")
    port = ascii_int(port_text, 5)
    if not sep or not host.strip("[]") or port is None or not 1 <= port <= 65535:
        shown = repr(address) if len(address) <= 60 else repr(address[:50]) + "..."
        raise ClusterError(f"{via}: expected HOST:PORT of a Ray head node (e.g. 10.0.0.1:6379) or auto, got {shown}")
    return host.strip("[]"), port


def _check_reachable(address: str, seconds: float = 5.0, via: str = "--ray") -> None:
    """Fail in seconds, not minutes (Ray retries an unreachable head for long), when nothing
    answers at HOST:PORT (or ray://HOST:PORT). `via`: where the address came from (--ray, or
    RAY_ADDRESS for --ray auto)."""
    host, port = _host_port(address, via)
    where, instead = (address, "give --ray auto") if via == "--ray" else \
        (f"{address} (RAY_ADDRESS, which --ray auto joins)", "unset RAY_ADDRESS for a local cluster")
    try:
        with socket.create_connection((host, port), timeout=seconds) as conn:
            answer = _http2_answer(conn, seconds)
    except (OSError, UnicodeError) as err:
        raise ClusterError(f"--ray: nothing answers at {where} ({getattr(err, 'strerror', None) or err}); start the "
                           f"head with `ray start --head --port=6379`, or {instead}") from None
    if answer is None:        # Ray would retry for minutes, printing its own warnings
        raise ClusterError(f"--ray: something answers at {where}, but not a Ray head (it does not speak "
                           f"gRPC); give the head's GCS address (`ray start --head` prints it), or {instead}")


HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
SETTINGS_FRAME = 0x04


def _http2_answer(conn: socket.socket, seconds: float) -> bytes | None:
    """The first frame header a server sends after HTTP/2's connection preface, or None when
    its answer is no HTTP/2 SETTINGS frame: a Ray head's GCS (and Ray Client's server) speak gRPC
    over HTTP/2, and every HTTP/2 server opens with SETTINGS (RFC 9113, 3.4); an HTTP/1 server,
    a database or a closed socket does not."""
    conn.settimeout(seconds)
    conn.sendall(HTTP2_PREFACE)
    header = b""
    try:
        while len(header) < 9:
            chunk = conn.recv(9 - len(header))
            if not chunk:
                break
            header += chunk
    except OSError:                                     # a timeout: it said nothing
        return None
    return header if len(header) == 9 and header[3] == SETTINGS_FRAME else None


def _cause(err: Exception) -> Exception:
    """The worker's own exception inside a Ray error (a SpecvizError keeps its one-line message)."""
    cause = getattr(err, "cause", None)
    return cause if isinstance(cause, Exception) else err


def worker_shape(resources: dict[str, float], nodes: list[dict[str, Any]], workers: int | None,
                 use_gpus: bool) -> tuple[int, int, int]:
    """(workers, CPUs per worker, GPUs per worker) from the cluster's resources: by default one
    worker per GPU (use_gpus) or per node; a CPU worker takes its node's share of the smallest
    node's CPUs, so Ray can place every worker."""
    gpus = int(resources.get("GPU", 0)) if use_gpus else 0
    alive = [n for n in nodes if n.get("Alive")] or nodes
    n = workers if workers is not None else (gpus or max(1, len(alive)))
    if gpus:
        if n > gpus:
            raise ClusterError(f"--ray-workers: {n} workers need a GPU each; the cluster has {gpus}")
        return n, 1, 1
    cpus = [int(node.get("Resources", {}).get("CPU", 0)) for node in alive]
    smallest = min((c for c in cpus if c > 0), default=0)
    if smallest == 0:
        raise ClusterError("--ray: the cluster has no CPUs for workers")
    per_node = math.ceil(n / len([c for c in cpus if c > 0]))
    share = max(1, smallest // per_node)
    if n * share > sum(cpus):
        raise ClusterError(f"--ray-workers: {n} workers need a CPU each; the cluster has {sum(cpus)}")
    return n, share, 0


@dataclass
class ClusterBench(Measured):
    """A benchmark run spread over Ray workers; the same interface as runner.Bench to the
    command line (Measured, and measure)."""
    workers: list[Any]                                  # Ray actor handles of BenchWorker
    started_ray: bool                                   # this run started Ray: shut it down at the end
    lost: list[str] = field(default_factory=list)       # workers lost mid-run, with the reason
    size: int = 0                                       # workers started

    def submit(self, actor: Any, job: tuple[Question, int]) -> Any:
        """One question to one worker (the ActorPool's submit function)."""
        q, repeats = job
        return actor.measure.remote(q, repeats)

    def measure(self, questions: list[Question], repeats: int, warmup: int, bar: tqdm | None = None,
                on_question: Callable[[], None] | None = None, deadline: float | None = None) -> bool:
        """As Bench.measure: False if stopped early (Ctrl-C, time limit, a worker lost), with
        every finished question kept. The workers are ended when it returns."""
        ray = import_ray()
        from ray.exceptions import RayError
        from ray.util import ActorPool

        todo = list(questions)
        try:
            ray.get([w.warm_up.remote(questions, warmup) for w in self.workers])
            pool = ActorPool(self.workers)

            def feed() -> None:
                while todo and self.stop_reason is None and pool.has_free():
                    if deadline is not None and time.monotonic() >= deadline:
                        self.stop_reason = "time limit"
                        return
                    pool.submit(self.submit, (todo.pop(0), repeats))

            feed()
            while pool.has_next():
                try:
                    _, runs, skipped = pool.get_next_unordered()
                except RayError as err:                 # the worker died, or failed on the question
                    first = (str(_cause(err)).strip().splitlines() or [type(err).__name__])[0]
                    self.lost.append(first[:300])
                    self.stop_reason = self.stop_reason or "a worker was lost"
                    continue
                self.keep(runs, skipped)
                if bar is not None:
                    bar.update(repeats)
                if on_question is not None:
                    on_question()
                feed()
        except KeyboardInterrupt:
            self.stop_reason = "Ctrl-C"
        except RayError as err:                         # warm-up: a worker lost before any question
            raise ClusterError(f"--ray: a worker failed before measuring ({_cause(err)})") from None
        finally:
            self.close()
        for line in self.lost:
            print(f"warning: worker lost: {line}", file=sys.stderr)
        return self.stop_reason is None

    def close(self) -> None:
        ray = import_ray()
        for w in self.workers:
            try:
                ray.kill(w)
            except Exception:                           # already gone
                pass
        self.workers = []
        if self.started_ray:
            ray.shutdown()
            self.started_ray = False


def start_workers(address: str, load: Loader, methods: list[Method], max_new_tokens: int,
                  workers: int | None, use_gpus: bool) -> tuple[ClusterBench, Target]:
    """Join the cluster, start the workers and load the target on each (in parallel).
    Returns the bench and the target as the first worker loaded it."""
    ray = import_ray()
    from ray.exceptions import RayError

    started = connect(address)
    try:
        count, cpus, gpus = worker_shape(ray.cluster_resources(), ray.nodes(), workers, use_gpus)
        actor = ray.remote(BenchWorker).options(num_cpus=cpus, num_gpus=gpus, scheduling_strategy="SPREAD",
                                                runtime_env=_worker_env() or None)
        handles = [actor.remote() for _ in range(count)]
        try:
            targets = ray.get([h.start.remote(load, methods, max_new_tokens, cpus) for h in handles])
        except RayError as err:
            cause = _cause(err)
            if isinstance(cause, SpecvizError):
                raise cause from None
            raise ClusterError(f"--ray: a worker could not load the target ({cause})") from None
    except BaseException:
        if started:
            ray.shutdown()
        raise
    return ClusterBench(handles, started, size=count), targets[0]


def cluster_meta(address: str, bench: ClusterBench, target: Target) -> dict[str, Any]:
    """What results.json's meta records of the cluster: its address and the workers."""
    hosts = sorted({str((r.worker or {}).get("host")) for r in bench.runs if r.worker})
    return {"ray": {"address": address, "workers": bench.size,
                    "hosts": hosts, "first_worker": target.worker, "lost": list(bench.lost)}}
