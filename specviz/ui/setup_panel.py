"""The run set-up: model, drafter (from the registry) with its settings, decoding settings,
and the text inputs; turns the inputs' values into a RunSpec."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import gradio as gr

from ..decoding import DecodingConfig
from ..drafters.base import REGISTRY, default, names
from ..settings import build
from .session import RunSpec
from .settings_form import SettingsForm

DECODING_OVERRIDES = {"max_new_tokens": {"maximum": 1024, "value": 128, "label": "max new tokens"}}


def drafter_names() -> list[str]:
    """The registered drafters in their specs' order (baseline first)."""
    return names()


def drafter_about(name: str) -> str:
    spec = REGISTRY[name]
    ref = f" *Reference: {spec.reference}.*" if spec.reference and spec.reference != "-" else ""
    return f"**{name}**: {spec.summary}{ref}"


@dataclass
class SetupPanel:
    model: gr.Textbox
    drafter: gr.Dropdown
    about: gr.Markdown
    drafter_form: SettingsForm
    decoding_form: SettingsForm
    context: gr.Textbox | None = None
    message: gr.Textbox | None = None

    @property
    def inputs(self) -> list[Any]:
        return [self.model, self.drafter, self.context, self.message,
                *self.decoding_form.components, *self.drafter_form.components]

    def spec(self, values: Sequence[Any]) -> RunSpec:
        """A RunSpec from the values of `inputs`; raises ConfigError for a bad value."""
        model, drafter, context, message = values[:4]
        n_dec = len(self.decoding_form.components)
        decoding = build(DecodingConfig, self.decoding_form.values("decoding", values[4:4 + n_dec]))
        settings = self.drafter_form.values(drafter, values[4 + n_dec:])
        if drafter in REGISTRY:
            REGISTRY[drafter].config(settings)              # validate now: ConfigError names the field
        return RunSpec((model or "").strip() or "embedded", drafter, tuple(settings.items()), decoding,
                       context or "", message or "")


def build_setup_panel() -> SetupPanel:
    listed = drafter_names()
    chosen = default().name
    model = gr.Textbox(value="embedded", label="Model", elem_id="model-id",
                       info="'embedded' (SmolLM2-135M-Instruct, offline), 'tiny-random' (random weights, "
                            "for trying the page), a local path or a hub id. Loaded once, then cached.")
    drafter = gr.Dropdown(choices=listed, value=chosen, label="Drafter", elem_id="drafter")
    about = gr.Markdown(drafter_about(chosen))
    form = SettingsForm()
    with gr.Accordion("Drafter settings", open=True):
        for name in listed:
            form.add_group(name, REGISTRY[name].config_cls, visible=(name == chosen))
    decoding = SettingsForm()
    with gr.Accordion("Decoding", open=False):
        decoding.add_group("decoding", DecodingConfig, overrides=DECODING_OVERRIDES)
    drafter.change(lambda n: [drafter_about(n), *form.show_only(n)], inputs=drafter,
                   outputs=[about, *form.groups.values()], queue=False, api_visibility="private")
    return SetupPanel(model, drafter, about, form, decoding)
