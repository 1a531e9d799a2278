"""The forward-cost curve (cost.py's `calibrate`) kept on disk, per machine, so that a second
process does not time the target again (11-13 s for the embedded model on this project's CPU).

A curve is kept under a key of everything its shape depends on (`curve_key`): the model's
fingerprint (models/fingerprint.py: architecture and a sample of its weights), the device with
its processor's or GPU's name, the dtype, torch's thread count and (on a CPU) the OpenMP /
MKL environment variables (`threading_env`), cpu_linear, the attention
implementation, the device map, the torch version, and the curve's own grid and cache length
(cost.GRID, cost.CALIBRATION_CACHE_TOKENS). One JSON file per key in `store_dir()`
(SPECVIZ_COST_CURVES, else `cost-curves` under the cache folder, files/cachedir.py), holding
the key, the row counts, the seconds and when they were measured.

- Fresh (younger than MAX_AGE_S) -> reused, stamped "disk" with its age.
- Stale, missing, unreadable or from another key -> timed again and written back.
- `retime=True` (`load_model(..., retime_cost=True)`, the CLI's `--retime`) -> timed again now.

MAX_AGE_S is a week. Everything that changes the curve's shape for a known reason is in the key,
so a stored curve goes wrong only by what the key cannot see: the load the machine was under
when it was timed (a curve timed beside a busy neighbour is too flat or too steep), a BIOS or
driver update, a thermal change. The engine's running scale (cost.VerifyCost.observe) corrects a
uniform slowdown within every generation, but not a wrong shape; a week bounds how long a curve
timed at a bad moment is trusted, and `--retime` is there when a user knows the moment was bad.
On a CPU the store also sees the load: the one-minute load average per core when the timing began
is kept with the curve (`load`), and a curve timed above BUSY_LOAD (more runnable threads than
cores: other work was competing) is trusted for BUSY_MAX_AGE_S only, an hour, then timed again.
(A curve timed on this project's 2-core CPU beside a test run read 1.06 s for one row and 3.9 s
for three, against 73 and 69 ms quiet, and padded 11-row trees to 20 rows for a week.)

Several processes may ask at once (a Space's workers, parallel tests): the timing of a key is
done under an exclusive lock file (fcntl.flock) beside it, so a second process waits and then
reads the first one's curve rather than timing beside it (two timings at once on one machine
would each measure a loaded machine); the file is written whole (a temporary file, then
os.replace), so a reader never sees half of one. Where the store cannot be written (a read-only
home), or with SPECVIZ_COST_CURVES=off, the curve is timed once per process, as before.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import torch

from ..files.cachedir import cache_dir
from ..files.user_files import FileCheckError, loads_json, write_text_atomic
from .cost import CALIBRATION_CACHE_TOKENS, GRID, CurveStamp, VerifyCost

MAX_AGE_S = 7 * 24 * 3600          # a week (see the module's doc)
BUSY_LOAD = 1.0                    # load average per core above which a CPU timing was competing
BUSY_MAX_AGE_S = 3600              # how long a curve timed on a busy CPU is trusted
STORE_ENV = "SPECVIZ_COST_CURVES"  # a folder, or "off" (no store: timed once per process)
FORMAT = 1


def store_dir() -> Path | None:
    """Where curves are kept; None when the store is off."""
    chosen = os.environ.get(STORE_ENV, "")
    if chosen.strip().lower() == "off":
        return None
    return Path(chosen).expanduser() if chosen else cache_dir() / "cost-curves"


def cpu_model() -> str:
    """The CPU's model name (Linux /proc/cpuinfo, else what platform says); the bench records it too."""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


# environment variables that change how a CPU's compute threads wait and spread (OpenMP, MKL)
THREADING_PREFIXES = ("OMP_", "GOMP_", "KMP_", "MKL_")


def threading_env() -> dict[str, str]:
    """The OpenMP / MKL settings of this process's environment: they move CPU timings as much as the
    thread count does (OMP_WAIT_POLICY=passive puts a sleeping thread's wake-up into every small
    operation), so a curve's key and the bench's results record them."""
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith(THREADING_PREFIXES)}


def threading_note(env: dict[str, str]) -> str | None:
    """A sentence for a timing run whose environment makes OpenMP threads sleep; None otherwise."""
    if env.get("OMP_WAIT_POLICY", "").strip().lower() != "passive":
        return None
    return ("OMP_WAIT_POLICY=passive: OpenMP threads sleep between operations, which slows decoding on a CPU "
            "(the embedded model's vanilla ran at 12.1 tokens/s under it against 21.8 without, one request; "
            "benchmarks/README.md, \"Under load\"); these timings compare only with runs under the same setting")


def machine_load(device_type: str) -> float | None:
    """The one-minute load average per core on a CPU (what competes with a CPU timing); None on
    other devices, where the host's load does not slow the forward alike, or where it is unknown."""
    if device_type != "cpu":
        return None
    try:
        return os.getloadavg()[0] / max(1, os.cpu_count() or 1)
    except (OSError, AttributeError):
        return None


def processor_name(device: torch.device) -> str:
    """The GPU's name on CUDA; the CPU's model name elsewhere."""
    return torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_model()


def curve_key(fingerprint: str, device: torch.device, dtype: torch.dtype, cpu_linear: bool,
              attention: str, device_map: tuple[tuple[str, str], ...] = ()) -> dict[str, Any]:
    """What a curve's shape depends on (JSON-able)."""
    return {"model": fingerprint, "device": device.type, "processor": processor_name(device),
            "dtype": str(dtype).replace("torch.", ""), "threads": torch.get_num_threads(),
            "threading_env": threading_env() if device.type == "cpu" else {}, "cpu_linear": cpu_linear, "attention": attention, "device_map": [list(p) for p in device_map],
            "torch": torch.__version__, "grid": list(GRID), "cache_tokens": CALIBRATION_CACHE_TOKENS}


def key_text(key: dict[str, Any]) -> str:
    """A short readable form of a key (the Trace's `cost_curve.key`)."""
    text = (f"{key['model']}/{key['device']}:{key['processor']}/{key['dtype']}/threads={key['threads']}"
            + "".join(f"/{k}={v}" for k, v in (key.get("threading_env") or {}).items())
            + f"/cpu_linear={'on' if key['cpu_linear'] else 'off'}")
    return text + ("/mapped" if key.get("device_map") else "")


def _file(folder: Path, key: dict[str, Any]) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]
    return folder / f"{digest}.json"


def read(path: Path, key: dict[str, Any]) -> VerifyCost | None:
    """The curve kept at `path` for exactly `key`, stamped "disk"; None if there is none, it is
    unreadable, malformed or another key's."""
    kept = _read(path, key)
    return kept[0] if kept else None


def _read(path: Path, key: dict[str, Any]) -> tuple[VerifyCost, float | None] | None:
    """(the curve, the load per core it was timed under, None where not kept) at `path` for `key`."""
    try:
        data = loads_json(path.read_text(encoding="utf-8"), "cost curve")
    except (OSError, UnicodeDecodeError, FileCheckError):
        return None
    try:
        if data["format"] != FORMAT or data["key"] != key:
            return None
        sizes = tuple(int(s) for s in data["sizes"])
        seconds = tuple(float(s) for s in data["seconds"])
        measured_at = float(data["measured_at"])
        load = None if data.get("load") is None else float(data["load"])
    except (KeyError, TypeError, ValueError):
        return None
    if not sizes or len(sizes) != len(seconds) or list(sizes) != sorted(set(sizes)) or min(seconds) <= 0:
        return None
    return VerifyCost(sizes, seconds, stamp=CurveStamp(key_text(key), measured_at, "disk")), load


def write(path: Path, key: dict[str, Any], curve: VerifyCost, measured_at: float, load: float | None = None) -> None:
    """The curve, whole or not at all (FileCheckError when it cannot be written); `load`: the load
    per core it was timed under (machine_load)."""
    data = {"format": FORMAT, "key": key, "measured_at": measured_at, "sizes": list(curve.sizes),
            "seconds": list(curve.seconds), "load": load}
    write_text_atomic(path, json.dumps(data, indent=1), "cost curve")


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive lock on `path`'s lock file while the block runs (no lock where fcntl is missing)."""
    try:
        import fcntl
    except ImportError:                        # not on POSIX: an unlocked store is still whole-file safe
        yield
        return
    with open(path.with_suffix(".lock"), "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def kept_curve(key: dict[str, Any], time_it: Callable[[], VerifyCost], retime: bool = False,
               max_age_s: float = MAX_AGE_S, now: Callable[[], float] = time.time,
               load: Callable[[], float | None] | None = None) -> VerifyCost:
    """The curve for `key`: a fresh one from the store, else `time_it()` (stamped "timed") written
    to the store for the next process. `retime`: time it now whatever the store holds (a curve
    another process timed after this call began is as new, and is taken). `load`: the machine's
    load per core now (default machine_load of the key's device); a curve timed above BUSY_LOAD
    is fresh for BUSY_MAX_AGE_S only."""
    folder = store_dir()
    if folder is None:
        return _timed(key, time_it, now)
    path = _file(folder, key)
    asked_at = now()
    load_now = load if load is not None else (lambda: machine_load(str(key.get("device", ""))))

    def usable(found: tuple[VerifyCost, float | None] | None) -> VerifyCost | None:
        if found is None or found[0].stamp is None:
            return None
        kept, busy = found[0], found[1] is not None and found[1] > BUSY_LOAD
        assert kept.stamp is not None
        if retime:
            return kept if kept.stamp.measured_at >= asked_at else None
        return kept if kept.stamp.age(now()) <= (min(max_age_s, BUSY_MAX_AGE_S) if busy else max_age_s) else None

    if (kept := usable(_read(path, key))) is not None:
        return kept
    try:
        folder.mkdir(parents=True, exist_ok=True)
        lock = _locked(path)
        lock.__enter__()
    except OSError:                            # a read-only cache: time it here, keep nothing
        return _timed(key, time_it, now)
    try:
        # another process may have timed it while this one waited for the lock
        if (kept := usable(_read(path, key))) is not None:
            return kept
        busy = load_now()
        curve = _timed(key, time_it, now)
        assert curve.stamp is not None
        try:
            write(path, key, curve, curve.stamp.measured_at, busy)
        except FileCheckError:
            pass                               # a full disk: this process keeps its timing
        return curve
    finally:
        lock.__exit__(None, None, None)


def _timed(key: dict[str, Any], time_it: Callable[[], VerifyCost], now: Callable[[], float]) -> VerifyCost:
    """`time_it()` stamped "timed", measured when it finished."""
    curve = time_it()
    return VerifyCost(curve.sizes, curve.seconds, stamp=CurveStamp(key_text(key), now(), "timed"))
