"""The run set-up: model, drafter (from the registry) with its settings and presets (a preset
fills the settings form; drafters.choice resolves it, as for the CLI and bench), decoding
settings, and the text inputs; turns the inputs' values into a RunSpec."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import gradio as gr

from ..core.decoding import DecodingConfig
from ..drafters.kit.base import REGISTRY, default, names
from ..drafters.kit.choice import DrafterChoice
from ..errors import ConfigError, check_choice
from ..core.precision import DTYPE_CHOICES
from ..core.settings import build
from .session import RunSpec
from .settings_form import SettingsForm

DECODING_OVERRIDES = {"max_new_tokens": {"maximum": 1024, "value": 128, "label": "max new tokens"}}
DEFAULTS = "defaults"          # the preset dropdown's entry for the drafter's own defaults


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
    def inputs(self) -> list[Any]:
        # the dtype comes last, so the positions of everything before it stay as they were
        return [self.model, self.drafter, self.context, self.message,
                *self.decoding_form.components, *self.drafter_form.components,
                *([self.dtype] if self.dtype is not None else []),
                *([self.device_map, self.max_memory] if self.device_map is not None else [])]

    def spec(self, values: Sequence[Any]) -> RunSpec:
        """A RunSpec from the values of `inputs`; raises ConfigError for a bad decoding, dtype or
        device-map value. The drafter's settings are validated once, by the run service, when
        the run is prepared (runner.prepare)."""
        model, drafter, context, message = values[:4]
        n_dec = len(self.decoding_form.components)
        decoding = build(DecodingConfig, self.decoding_form.values("decoding", values[4:4 + n_dec]))
        n_drafter = len(self.drafter_form.components)
        settings = self.drafter_form.values(drafter, values[4 + n_dec:4 + n_dec + n_drafter])
        rest = values[4 + n_dec + n_drafter:]
        dtype = (rest[0] if rest and rest[0] else "auto") if self.dtype is not None else "auto"
        check_choice("dtype", dtype, DTYPE_CHOICES)
        device_map, max_memory = device_map_values(rest[1:3] if self.device_map is not None else ())
        return RunSpec((model or "").strip() or "embedded", drafter, tuple(settings.items()), decoding,
                       context or "", message or "", dtype, device_map, max_memory)


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


def build_setup_panel() -> SetupPanel:
    listed = drafter_names()
    chosen = default().name
    model = gr.Textbox(value="embedded", label="Model", elem_id="model-id",
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
                                     "accelerate across GPUs and CPU memory (docs/gpu.md); recorded in the trace.")
        max_memory = gr.Textbox(value="", label="Max memory", elem_id="max-memory", placeholder="0=20GiB,1=20GiB,cpu=60GiB",
                                info="What each device may hold for the weights; empty: all free memory.")
    with gr.Row():
        drafter = gr.Dropdown(choices=listed, value=chosen, label="Drafter", elem_id="drafter", scale=2)
        preset = gr.Dropdown(choices=preset_names(chosen), value=DEFAULTS, label="Preset", elem_id="preset",
                             scale=1, info="Fills the settings: 'paper' = the paper's own method "
                                           "(every extension off); 'defaults' = ours.")
    about = gr.Markdown(drafter_about(chosen))
    preset_about = gr.Markdown("")
    form = SettingsForm()
    with gr.Accordion("Drafter settings", open=True):
        for name in listed:
            form.add_group(name, REGISTRY[name].config_cls, visible=(name == chosen))
    decoding = SettingsForm()
    with gr.Accordion("Decoding", open=False):
        decoding.add_group("decoding", DecodingConfig, overrides=DECODING_OVERRIDES)
    drafter.change(lambda n: [drafter_about(n), gr.update(choices=preset_names(n), value=DEFAULTS), "",
                              *form.show_only(n)], inputs=drafter,
                   outputs=[about, preset, preset_about, *form.groups.values()], queue=False,
                   api_visibility="private")
    preset.input(lambda n, p: [preset_note(n, p), *preset_updates(form, n, p)], inputs=[drafter, preset],
                 outputs=[preset_about, *form.components], queue=False, api_visibility="private")
    return SetupPanel(model, drafter, about, form, decoding, preset=preset, preset_about=preset_about,
                      dtype=dtype, device_map=device_map, max_memory=max_memory)
