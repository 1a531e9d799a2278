"""The run set-up: model, drafter (from the registry) with its settings and presets (a preset
fills the settings form; drafters.choice resolves it, as for the CLI and bench), decoding
settings, and the text inputs; turns the inputs' values, passed by name, into the run service's
RunRequest (the one request type of the CLI, the bench and the page)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import gradio as gr

from ..core.decoding import DecodingConfig
from ..drafters.kit.base import REGISTRY, default, names
from ..drafters.kit.choice import DrafterChoice
from ..errors import ConfigError, check_choice
from ..core.precision import DTYPE_CHOICES
from ..core.settings import build
from ..engine.service import RunRequest
from .settings_form import SettingsForm, input_name

DECODING_OVERRIDES = {"max_new_tokens": {"maximum": 1024, "value": 128, "label": "max new tokens"}}
DEFAULTS = "defaults"          # the preset dropdown's entry for the drafter's own defaults
DECODING = "decoding"          # the decoding form's group
SETTINGS_SOURCE = "settings"   # how a contradiction with the drafter's brackets names the form's values


def drafter_names() -> list[str]:
    """The registered drafters in their specs' order (baseline first)."""
    return names()


def drafter_about(name: str) -> str:
    spec = REGISTRY[name]
    ref = f" *Reference: {spec.reference}.*" if spec.reference and spec.reference != "-" else ""
    return f"**{name}**: {spec.summary}{ref}"


def preset_names(name: str) -> list[str]:
    """The preset dropdown's choices for a drafter: its defaults, then its presets."""
    return [DEFAULTS, *REGISTRY[name].presets] if name in REGISTRY else [DEFAULTS]


def preset_note(name: str, preset: str | None) -> str:
    if not preset or preset == DEFAULTS or name not in REGISTRY:
        return ""
    return f"*Preset `{name}@{preset}`: {REGISTRY[name].presets[preset].source}.*"


def preset_updates(form: SettingsForm, name: str, preset: str | None) -> list[Any]:
    """The drafter form's updates for a preset: its values, every other setting at its default."""
    if name not in REGISTRY:
        return [gr.skip() for _ in form.components]
    values = DrafterChoice(name, None if not preset or preset == DEFAULTS else preset).values()
    return form.fill(name, values, REGISTRY[name].config_cls)


@dataclass(frozen=True)
class Opening:
    """What the panel shows when the page opens: the recorded run's model, drafter, settings
    and decoding (landing.py), so the panel and the run on the page agree."""
    model: str = "embedded"
    drafter: str = ""                                  # "" = the registry's default drafter
    settings: Mapping[str, Any] = field(default_factory=dict)
    decoding: Mapping[str, Any] = field(default_factory=dict)
    note: str = ""                                     # said under the preset box


@dataclass
class SetupPanel:
    model: gr.Textbox
    drafter: gr.Dropdown
    about: gr.Markdown
    drafter_form: SettingsForm
    decoding_form: SettingsForm
    context: gr.Textbox | None = None
    message: gr.Textbox | None = None
    preset: gr.Dropdown | None = None       # fills drafter_form; not an input of the run itself
    preset_about: gr.Markdown | None = None
    dtype: gr.Dropdown | None = None
    device_map: gr.Textbox | None = None     # the target split across GPUs (placement.py)
    max_memory: gr.Textbox | None = None

    @property
    def inputs(self) -> dict[str, Any]:
        """Every input of a run by its keyword (gradio's inputs_kwargs: a handler gets each
        value by name); `request` reads them back."""
        boxes = {"model": self.model, "drafter": self.drafter, "context": self.context, "message": self.message,
                 "dtype": self.dtype, "device_map": self.device_map, "max_memory": self.max_memory}
        return {**{k: c for k, c in boxes.items() if c is not None}, **self.decoding_form.named,
                **self.drafter_form.named}

    def request(self, form: Mapping[str, Any]) -> RunRequest:
        """The run service's request from the inputs' values by keyword (`inputs`); raises
        ConfigError for a bad decoding, dtype or device-map value. The drafter's settings are
        validated once, by the run service, when the run is prepared (runner.prepare)."""
        drafter = str(form.get("drafter") or "")
        decoding = build(DecodingConfig, self.decoding_form.values(DECODING, form))
        dtype = str(form.get("dtype") or "auto")
        check_choice("dtype", dtype, DTYPE_CHOICES)
        device_map, max_memory = device_map_values((form.get("device_map"), form.get("max_memory")))
        return RunRequest(model_id=str(form.get("model") or "").strip() or "embedded", drafter=drafter,
                          settings=tuple(self.drafter_form.values(drafter, form).items()),
                          settings_source=SETTINGS_SOURCE, decoding=decoding,
                          message=str(form.get("message") or ""), context=str(form.get("context") or ""),
                          dtype=dtype, device_map=device_map or None, max_memory=max_memory or None)

    def settings_of(self, drafter: str, form: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
        """The form's settings for `drafter` (each drafter has its own group of inputs)."""
        return tuple(self.drafter_form.values(drafter, form).items())

    def form(self, **given: Any) -> dict[str, Any]:
        """The inputs' values by keyword as a page that changed only `given` sends them: a box's
        value by its name (model, drafter, context, message, dtype, device_map, max_memory), a
        setting by its name (the decoding's, else the chosen drafter's). For scripts and tests."""
        values: dict[str, Any] = {"context": "", "message": "", "dtype": "auto", "device_map": "", "max_memory": "",
                                  **{k: getattr(c, "value", None) for k, c in self.inputs.items()}}
        drafter = given.get("drafter", values.get("drafter"))
        for key, value in given.items():
            if key in values and "__" not in key:
                values[key] = value
            elif input_name(DECODING, key) in values:
                values[input_name(DECODING, key)] = value
            elif input_name(str(drafter), key) in values:
                values[input_name(str(drafter), key)] = value
            else:
                raise KeyError(f"no input named {key!r} (for drafter {drafter!r})")
        return values


def device_map_values(values: Sequence[Any]) -> tuple[str, str]:
    """The device-map box's (map, budget): a strategy name or the map as JSON text (the explorer
    reads no files on the server), checked now; ("", "") when empty."""
    from ..models.placement import STRATEGIES, parse_max_memory, read_device_map

    device_map = str(values[0] or "").strip() if values else ""
    max_memory = str(values[1] or "").strip() if len(values) > 1 else ""
    if not device_map:
        if max_memory:
            raise ConfigError("max_memory", "it budgets a device map; choose one (e.g. auto) first")
        return "", ""
    if device_map not in STRATEGIES and not device_map.startswith("{"):
        raise ConfigError("device_map", f"give {', '.join(STRATEGIES)} or the map as JSON text "
                                        '({"model.layers.0": 0, ...}), not a file name')
    read_device_map(device_map)                     # DeviceMapError (one line) for bad JSON or devices
    parse_max_memory(max_memory)
    return device_map, max_memory


def build_setup_panel(opening: Opening | None = None) -> SetupPanel:
    """The panel, showing `opening`'s values (the defaults without one)."""
    opening = opening or Opening()
    listed = drafter_names()
    chosen = opening.drafter if opening.drafter in REGISTRY else default().name
    model = gr.Textbox(value=opening.model, label="Model", elem_id="model-id",
                       info="'embedded' (SmolLM2-135M-Instruct, offline), 'tiny-random' (random weights, "
                            "for trying the page), a local path or a hub id. Loaded once, then cached.")
    dtype = gr.Dropdown(choices=list(DTYPE_CHOICES), value="auto", label="Precision", elem_id="dtype",
                        info="auto: float32 on a CPU, and on a GPU when the model fits (outputs equal "
                             "vanilla's exactly); bfloat16 / float16: faster on a GPU, outputs equal "
                             "vanilla's up to near-ties (the Compare tab explains each difference)")
    with gr.Accordion("Split the model across GPUs (device map)", open=False):
        device_map = gr.Textbox(value="", label="Device map", elem_id="device-map",
                                placeholder="auto | balanced | sequential | {\"model.layers.0\": 0, ...}",
                                info="Empty: one device. A strategy or a JSON map places the target with "
                                     "accelerate across GPUs and CPU memory (docs/gpu.md); recorded in the trace. "
                                     "Without a GPU a strategy keeps every layer on the CPU (the run says so).")
        max_memory = gr.Textbox(value="", label="Max memory", elem_id="max-memory", placeholder="0=20GiB,1=20GiB,cpu=60GiB",
                                info="What each device may hold for the weights; empty: all free memory.")
    with gr.Row():
        drafter = gr.Dropdown(choices=listed, value=chosen, label="Drafter", elem_id="drafter", scale=2,
                              min_width=160)
        preset = gr.Dropdown(choices=preset_names(chosen), value=DEFAULTS, label="Preset", elem_id="preset",
                             scale=1, min_width=140, info="Fills the settings: 'paper' = the paper's own method "
                                                          "(every extension off); 'defaults' = ours.")
    about = gr.Markdown(drafter_about(chosen))
    preset_about = gr.Markdown(opening.note, elem_id="preset-about")
    form = SettingsForm()
    with gr.Accordion("Drafter settings", open=True):
        for name in listed:
            form.add_group(name, REGISTRY[name].config_cls, visible=(name == chosen),
                           values=opening.settings if name == chosen else None)
    decoding = SettingsForm()
    with gr.Accordion("Decoding", open=False):
        decoding.add_group(DECODING, DecodingConfig, overrides=DECODING_OVERRIDES, values=opening.decoding)
    drafter.change(lambda n: [drafter_about(n), gr.update(choices=preset_names(n), value=DEFAULTS), "",
                              *form.show_only(n)], inputs=drafter,
                   outputs=[about, preset, preset_about, *form.groups.values()], queue=False,
                   api_visibility="private")
    preset.input(lambda n, p: [preset_note(n, p), *preset_updates(form, n, p)], inputs=[drafter, preset],
                 outputs=[preset_about, *form.components], queue=False, api_visibility="private")
    return SetupPanel(model, drafter, about, form, decoding, preset=preset, preset_about=preset_about,
                      dtype=dtype, device_map=device_map, max_memory=max_memory)
