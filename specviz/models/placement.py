"""Device maps: a target split across GPUs, CPU memory and disk, placed by accelerate.

    spec = read_device_map("auto" | "balanced" | "FILE.json" | '{"model.layers.0": 0, ...}')
    budget = parse_max_memory("0=20GiB,1=20GiB,cpu=60GiB")
    device_map = resolve(meta_or_real_model, spec, budget, dtype, offload_folder)   # {module: device}

Nothing here places a weight by hand: a named strategy becomes a map through accelerate's
`get_balanced_memory` / `infer_auto_device_map` (as transformers' `from_pretrained(device_map=...)`
does), a map is checked with accelerate's `check_device_map`, and the weights are put in place by
`from_pretrained(device_map=...)` (hub ids, local folders) or `accelerate.dispatch_model` (models
built in memory: the embedded GGUF, tiny-random). Accelerate's rule for where a module *runs*
(its execution device) is followed by `execution_device`: a module mapped to a GPU runs there;
one mapped to "cpu" or "disk" is offloaded and runs on the map's main device (its first GPU, or
the CPU when the map has none). The engine puts its inputs on the embedding's execution device
(`input_device`); accelerate's hooks move activations, the attention mask and positions to each
layer's device; the KV cache of a layer lives on that layer's device.

Every mistake (an unknown module, malformed JSON, an unknown device, a budget that cannot hold
the model) is a DeviceMapError with one line that says what to change.
"""
from __future__ import annotations

import atexit
import os
import re
import shutil
import tempfile
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Union

import torch

from ..errors import ModelLoadError
from ..files.user_files import loads_json, read_text_file
from ..files.user_values import ascii_int, byte_size

if TYPE_CHECKING:
    from transformers import PreTrainedModel

DeviceName = Union[int, str]                # accelerate's: a GPU index, "cpu", "disk", "mps", "cuda:N"
STRATEGIES = ("auto", "balanced", "balanced_low_0", "sequential")
DEVICE_MAP_HELP = ("split the target across devices with accelerate: auto | balanced | balanced_low_0 | "
                   "sequential | FILE.json (a {module: device} map, devices 0, 1, 'cuda:1', 'cpu', "
                   "'disk'); with --max-memory and --offload-folder. Recorded in the trace (docs/gpu.md)")
MAX_MEMORY_HELP = "the memory each device may hold for the weights, e.g. 0=20GiB,1=20GiB,cpu=60GiB"
OFFLOAD_HELP = "folder for weights offloaded to disk (a map with 'disk', or a budget too small for the model)"


class DeviceMapError(ModelLoadError):
    """A device map, memory budget or offload folder that cannot be used. `web_message`, where
    the message names a command-line flag: the same without it, for the explorer (which sets no
    offload folder: it never writes weights to the server's disk)."""

    def __init__(self, message: str, web_message: str | None = None) -> None:
        super().__init__(message)
        self.web_message = web_message


WEB_NO_DISK = ("the explorer does not offload weights to the server's disk; map every module to a GPU or "
               "'cpu', or raise max_memory")


def read_device_map(text: str) -> str | dict[str, DeviceName]:
    """--device-map's value: a strategy name, a JSON file path, or inline JSON (an object)."""
    text = (text or "").strip()
    if not text:
        raise DeviceMapError("device_map: empty; use auto, balanced, balanced_low_0, sequential or a FILE.json")
    if text in STRATEGIES:
        return text
    if text.startswith("{"):
        source, raw = "device_map", text
    else:
        path = Path(text).expanduser()
        if not path.is_file():
            raise DeviceMapError(f"device_map: {text!r} is neither a strategy ({', '.join(STRATEGIES)}) "
                                 "nor a JSON file")
        source = f"device_map {text!r}"
        raw = read_text_file(text, source, error=DeviceMapError)
    data = loads_json(raw, source, error=DeviceMapError,
                      hint='expected an object like {"model.layers.0": 0, "lm_head": "cpu"}')
    if not isinstance(data, dict) or not data:
        raise DeviceMapError(f"{source}: expected a non-empty JSON object of module name -> device")
    return {str(k): device_name(v, f"{source}: module {k!r}") for k, v in data.items()}


_CUDA = re.compile(r"^cuda(?::(\d+))?$")


def device_name(value: Any, where: str = "device_map") -> DeviceName:
    """One map value checked and normalised: a GPU index (int), "cpu", "disk", "mps" or "cuda:N"."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise DeviceMapError(f"{where}: device {value!r} is not a device; use 0, 1, ..., 'cuda:N', 'cpu' or 'disk'")
    number = ascii_int(value) if isinstance(value, str) else None    # "1" is GPU 1; "١" or "²" is no device
    if number is not None:
        value = number
    if isinstance(value, int):
        index = value
    else:
        value = value.strip()
        if value in ("cpu", "disk"):
            return value
        if value == "mps":
            if not (hasattr(torch.backends, "mps") and torch.backends.mps.is_available()):
                raise DeviceMapError(f"{where}: device 'mps' asked for, but torch sees no Apple GPU")
            return value
        match = _CUDA.match(value)
        if not match:
            raise DeviceMapError(f"{where}: unknown device {value!r}; use 0, 1, ..., 'cuda:N', 'cpu' or 'disk'")
        index = int(match.group(1) or 0)
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if not 0 <= index < count:
        raise DeviceMapError(f"{where}: GPU {index} asked for, but torch sees "
                             f"{count or 'no'} GPU{'s' if count != 1 else ''}; use 'cpu' or 'disk' there")
    return index


def parse_max_memory(text: str | None) -> dict[DeviceName, str] | None:
    """'0=20GiB,cpu=60GiB' -> {0: '20GiB', 'cpu': '60GiB'} (None for an empty value). A size is
    read by files/user_values.byte_size (finite, above 0, at most 1 EiB; KB..TB powers of 1000,
    KiB..TiB of 1024, a bare number in bytes); one that accelerate would read otherwise (a bare
    number, TB, lower-case "gb", which accelerate takes for gigabits) is handed on in MiB."""
    from accelerate.utils import convert_file_size_to_int

    if text is None or not text.strip():
        return None
    out: dict[DeviceName, str] = {}
    for part in text.split(","):
        key, sep, size = part.partition("=")
        if not sep or not key.strip() or not size.strip():
            raise DeviceMapError(f"max_memory: expected DEVICE=SIZE pairs like 0=20GiB,cpu=60GiB, got {part.strip()!r}")
        dev = device_name(key.strip(), "max_memory")
        if dev in out:
            raise DeviceMapError(f"max_memory: {key.strip()} is given twice (as {dev!r}); give each device one size")
        size = size.strip()
        count = byte_size(size)
        if count is None:
            shown = repr(size) if len(size) <= 40 else repr(size[:30]) + "..."
            raise DeviceMapError(f"max_memory: size {shown} for {key.strip()} is not a size from 1 byte to 1 EiB "
                                 "like 20GiB, 500MB or 1e9 (bytes)")
        try:
            same = convert_file_size_to_int(size) == count
        except (ValueError, TypeError, OverflowError):
            same = False
        out[dev] = size if same else f"{count / 2**20!r}MiB"
    return out


def resolve(model: PreTrainedModel, spec: str | Mapping[str, DeviceName], max_memory: Mapping[DeviceName, str] | None,
            dtype: torch.dtype, offload_folder: str | None) -> dict[str, DeviceName]:
    """The {module: device} map for `model` (real or on the meta device): a strategy through
    accelerate's planner (as transformers does it), a given map checked against the model.
    Refuses disk offload without an offload folder (a budget too small for the model says so)."""
    from accelerate import infer_auto_device_map
    from accelerate.utils import check_device_map, get_balanced_memory, get_max_memory

    no_split = list(getattr(model, "_no_split_modules", None) or [])
    if isinstance(spec, str):
        budget = dict(max_memory) if max_memory else None
        try:
            if spec == "sequential":
                budget = get_max_memory(budget)
            else:
                budget = get_balanced_memory(model, max_memory=budget, no_split_module_classes=no_split,
                                             dtype=dtype, low_zero=spec == "balanced_low_0")
            device_map = dict(infer_auto_device_map(model, max_memory=budget, no_split_module_classes=no_split,
                                                    dtype=dtype))
        except (ValueError, KeyError, RuntimeError) as err:
            raise DeviceMapError(f"device_map {spec!r}: accelerate could not plan it ({_first_line(err)})") from None
        need = sum(p.numel() for p in model.parameters()) * torch.finfo(dtype).bits // 8
        if set(device_map.values()) == {"disk"}:
            what = (f"max_memory: the budget {_budget_text(max_memory)} holds none of the model ({need / 2**20:.1f} "
                    f"MiB of weights in {str(dtype).replace('torch.', '')}, the largest block included)")
            raise DeviceMapError(f"{what}; raise --max-memory", f"{what}; raise max_memory")
        if "disk" in device_map.values() and not offload_folder:
            what = (f"max_memory: the budget {_budget_text(max_memory)} cannot hold the model ({need / 2**20:.1f} "
                    f"MiB of weights in {str(dtype).replace('torch.', '')})")
            raise DeviceMapError(f"{what}; raise --max-memory, or give --offload-folder DIR to offload the rest "
                                     "to disk (slow)", f"{what}; {WEB_NO_DISK}")
        return device_map
    names = {name for name, _ in model.named_modules()}
    unknown = sorted(k for k in spec if k not in names)
    if unknown:
        top = sorted(n for n in names if n and n.count(".") <= 1)[:8]
        raise DeviceMapError(f"device_map: no module named {unknown[0]!r} in {type(model).__name__} "
                             f"(modules: {', '.join(top)}, ...)")
    device_map = dict(spec)
    try:
        check_device_map(model, device_map)
    except ValueError as err:
        raise DeviceMapError(f"device_map: {_first_line(err)}; give every module a device (or map \"\")") from None
    if set(device_map.values()) == {"disk"}:
        raise DeviceMapError("device_map: it maps every module to 'disk'; a model runs on a GPU or the CPU with "
                             "only some modules offloaded: map \"\" to 'cpu' (or a GPU) and the modules to "
                             "offload to 'disk'")
    if "disk" in device_map.values() and not offload_folder:
        raise DeviceMapError("device_map: it offloads modules to 'disk'; give --offload-folder DIR for their "
                                 "weights", f"device_map: it offloads modules to 'disk'; {WEB_NO_DISK}")
    return device_map


def dispatch(model: PreTrainedModel, device_map: Mapping[str, DeviceName], offload_folder: str | None
             ) -> PreTrainedModel:
    """Place an in-memory model by `device_map` with accelerate.dispatch_model. Disk-offloaded
    weights go to a fresh folder inside `offload_folder` (accelerate reuses a folder that already
    holds an index, which would load another model's weights)."""
    from accelerate import dispatch_model

    folder = fresh_offload_folder(offload_folder) if "disk" in device_map.values() else None
    return tie_offload(dispatch_model(model, dict(device_map), offload_dir=folder), folder)


def main_device(device_map: Mapping[str, DeviceName]) -> torch.device:
    """Where offloaded ("cpu", "disk") modules run, as accelerate.dispatch_model decides it: the
    map's first GPU device (in its set order), else the CPU."""
    gpus = set(device_map.values()) - {"cpu", "disk"}
    return as_device(list(gpus)[0]) if gpus else torch.device("cpu")


def as_device(name: DeviceName) -> torch.device:
    return torch.device("cuda", name) if isinstance(name, int) else torch.device(name)


def execution_device(model: PreTrainedModel, module: torch.nn.Module) -> torch.device:
    """The device `module` (a part of `model`) computes on: its accelerate hook's execution
    device, else by `model.hf_device_map` (the longest mapped prefix of its name; an offloaded
    module runs on the main device), else where its first real parameter or buffer lives."""
    hook = getattr(module, "_hf_hook", None)
    for h in getattr(hook, "hooks", None) or ([hook] if hook is not None else []):
        dev = getattr(h, "execution_device", None)
        if dev is not None:
            return dev if isinstance(dev, torch.device) else as_device(dev)
    device_map = getattr(model, "hf_device_map", None)
    if device_map:
        name = next((n for n, m in model.named_modules() if m is module), None)
        if name is not None:
            owners = [k for k in device_map if k == "" or name == k or name.startswith(k + ".")]
            if owners:
                dev = device_map[max(owners, key=len)]
                return main_device(device_map) if dev in ("cpu", "disk") else as_device(dev)
    for t in (*module.parameters(), *module.buffers()):
        if t.device.type != "meta":
            return t.device
    return torch.device("cpu")


def input_device(model: PreTrainedModel) -> torch.device:
    """Where a model's input ids go: its input embedding's execution device."""
    return execution_device(model, model.get_input_embeddings())


def output_device(model: PreTrainedModel) -> torch.device:
    """Where a model's logits are made: its LM head's execution device."""
    return execution_device(model, model.get_output_embeddings())


def recorded(device_map: Mapping[str, DeviceName] | None) -> dict[str, str] | None:
    """The map as the trace and results.json record it: {module: "0" | "cuda:1" | "cpu" | "disk"}."""
    if not device_map:
        return None
    return {k: str(v) for k, v in device_map.items()}


def _budget_text(max_memory: Mapping[DeviceName, str] | None) -> str:
    if not max_memory:
        return "(all free memory)"
    return ",".join(f"{k}={v}" for k, v in max_memory.items())


def _first_line(err: BaseException) -> str:
    return (str(err).strip().splitlines() or [type(err).__name__])[0][:300]


OFFLOAD_PREFIX = "specviz-offload-"


def fresh_offload_folder(base: str | None) -> str:
    """A new empty folder inside `base` for one load's disk-offloaded weights (a copy of them),
    named for this process (`specviz-offload-PID-...`). It is removed when the process ends
    (and by `tie_offload` when its model is dropped); folders left by a process that no longer
    runs (killed) are removed here."""
    root = Path(base or "").expanduser()
    try:
        root.mkdir(parents=True, exist_ok=True)
        _remove_orphans(root)
        folder = tempfile.mkdtemp(prefix=f"{OFFLOAD_PREFIX}{os.getpid()}-", dir=root)
    except OSError as err:
        raise DeviceMapError(f"offload_folder: cannot write in {str(root)!r} ({err})") from None
    atexit.register(shutil.rmtree, folder, True)
    return folder


def tie_offload(model: PreTrainedModel, folder: str | None) -> PreTrainedModel:
    """Remove `folder` (a fresh_offload_folder) once `model` is garbage (the model cache dropped
    it), or at exit, whichever comes first. Returns the model."""
    if folder:
        weakref.finalize(model, shutil.rmtree, folder, True)
    return model


def _remove_orphans(root: Path) -> None:
    """Remove `specviz-offload-PID-*` folders in `root` whose process no longer runs."""
    for entry in root.glob(f"{OFFLOAD_PREFIX}*"):
        pid = ascii_int(entry.name[len(OFFLOAD_PREFIX):].split("-", 1)[0], 10)
        if pid is None or pid == os.getpid() or not entry.is_dir() or entry.is_symlink():
            continue
        try:
            os.kill(pid, 0)                   # runs (or is another user's): keep its folder
        except ProcessLookupError:
            shutil.rmtree(entry, ignore_errors=True)
        except OSError:
            pass


def check_resident(model: PreTrainedModel, reader: str) -> None:
    """DeviceMapError unless the input embedding and the LM head hold their weights on a device:
    a model drafter (`reader`: GLIDE, Medusa / Hydra heads) reads those weights directly, and an
    offloaded module's weights stay on the meta device between accelerate's forward hooks."""
    for what, module, name in (("input embedding", model.get_input_embeddings(), "model.embed_tokens"),
                               ("LM head", model.get_output_embeddings(), "lm_head")):
        weight = getattr(module, "weight", None)
        if weight is not None and weight.device.type == "meta":
            raise DeviceMapError(f"device_map: {reader} reads the target's {what} weights directly, but the map "
                                 f"offloads it ('cpu' or 'disk' beside a GPU); map {name} to a GPU (or the "
                                 "whole model to one device)")
