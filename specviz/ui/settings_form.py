"""Gradio inputs rendered from a config dataclass (specviz.core.settings.describe).

Nothing here knows a drafter: each registered drafter gets a group of inputs built from its
config's fields (type, range, help), shown only while that drafter is selected. A new
drafter appears in the page by registering itself.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import gradio as gr

from ..core.settings import SettingInfo, describe

SLIDER_MAX_STEPS = 1024     # integer ranges wider than this get a number box


def _info_text(info: SettingInfo) -> str:
    return f"{info.help} Range {info.describe_range()}, default {info.default}."


def component_for(info: SettingInfo, overrides: Mapping[str, Any] | None = None) -> gr.components.Component:
    """One input for one setting; `overrides` (label, value, maximum...) adjust the default look."""
    kw: dict[str, Any] = {"label": info.name.replace("_", " "), "info": _info_text(info), "value": info.default}
    kw.update(overrides or {})
    if info.choices:
        return gr.Dropdown(choices=list(info.choices), **kw)
    if info.type is bool:
        return gr.Checkbox(**kw)
    if info.type in (int, float) and info.low is not None and info.high is not None:
        wide = info.type is int and (kw.get("maximum", info.high) - info.low) > SLIDER_MAX_STEPS
        if not wide:
            step = 1 if info.type is int else round((info.high - info.low) / 100, 6)
            kw.setdefault("minimum", info.low)
            kw.setdefault("maximum", info.high)
            return gr.Slider(step=step, **kw)
    if info.type in (int, float):
        return gr.Number(precision=0 if info.type is int else None, minimum=info.low,
                         maximum=info.high, **kw)
    return gr.Textbox(**kw)


@dataclass
class SettingsForm:
    """Inputs for the `ui` settings of one or more config classes, keyed by a name."""
    components: list[gr.components.Component] = field(default_factory=list)
    keys: list[tuple[str, str]] = field(default_factory=list)        # (group name, setting name)
    groups: dict[str, gr.Group] = field(default_factory=dict)

    def add_group(self, name: str, config_cls: type, visible: bool = True,
                  overrides: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        infos = [i for i in describe(config_cls) if i.ui]
        with gr.Group(visible=visible) as group:
            if not infos:
                gr.Markdown("*No settings.*")
            for info in infos:
                self.components.append(component_for(info, (overrides or {}).get(info.name)))
                self.keys.append((name, info.name))
        self.groups[name] = group

    def values(self, name: str, flat: Sequence[Any]) -> dict[str, Any]:
        """The group's values from the flat list of every component's value (as gradio passes them)."""
        return {setting: value for (group, setting), value in zip(self.keys, flat)
                if group == name and value is not None}

    def fill(self, name: str, values: Mapping[str, Any], config_cls: type) -> list[Any]:
        """One update per component (as `components` are ordered): the group `name`'s inputs get
        `values`, or their default where `values` has none; every other group is left alone."""
        defaults = {i.name: i.default for i in describe(config_cls)}
        return [gr.update(value=values.get(setting, defaults.get(setting))) if group == name else gr.skip()
                for group, setting in self.keys]

    def show_only(self, name: str) -> list[Any]:
        return [gr.update(visible=(g == name)) for g in self.groups]
