"""Gradio inputs rendered from a config dataclass (specviz.core.settings.describe).

Nothing here knows a drafter: each registered drafter gets a group of inputs built from its
config's fields (type, range, help), shown only while that drafter is selected. A new
drafter appears in the page by registering itself.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping

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


def element_id(group: str, setting: str) -> str:
    """The page's id of a setting's input: set-GROUP-SETTING (e.g. set-decoding-max_new_tokens)."""
    return "set-" + re.sub(r"[^A-Za-z0-9_-]+", "-", f"{group}-{setting}")


def input_name(group: str, setting: str) -> str:
    """The keyword a form's input is passed to a handler by (gradio's inputs_kwargs)."""
    return f"{group}__{setting}"


@dataclass
class SettingsForm:
    """Inputs for the `ui` settings of one or more config classes, keyed by a name. Handlers
    get their values by name (`named`: gradio passes each as a keyword argument) and read a
    group's back with `values`."""
    components: list[gr.components.Component] = field(default_factory=list)
    keys: list[tuple[str, str]] = field(default_factory=list)        # (group name, setting name)
    groups: dict[str, gr.Group] = field(default_factory=dict)

    def add_group(self, name: str, config_cls: type, visible: bool = True,
                  overrides: Mapping[str, Mapping[str, Any]] | None = None,
                  values: Mapping[str, Any] | None = None) -> None:
        """The group's inputs; `values` (setting -> value) replace their defaults (the run the
        page opens on)."""
        infos = [i for i in describe(config_cls) if i.ui]
        with gr.Group(visible=visible) as group:
            if not infos:
                gr.Markdown("*No settings.*")
            for info in infos:
                look = {"elem_id": element_id(name, info.name), **(overrides or {}).get(info.name, {})}
                if values is not None and info.name in values:
                    look["value"] = values[info.name]
                self.components.append(component_for(info, look))
                self.keys.append((name, info.name))
        self.groups[name] = group

    @property
    def named(self) -> dict[str, gr.components.Component]:
        """Every input by its keyword (input_name(group, setting))."""
        return {input_name(g, s): c for (g, s), c in zip(self.keys, self.components)}

    def values(self, name: str, form: Mapping[str, Any]) -> dict[str, Any]:
        """The group `name`'s values from a handler's keyword values (`named`'s keys); a setting
        left empty (None) is not given."""
        return {s: form[input_name(g, s)] for g, s in self.keys
                if g == name and form.get(input_name(g, s)) is not None}

    def defaults(self) -> dict[str, Any]:
        """Every input's value as built (by keyword): what a page that changed nothing sends."""
        return {input_name(g, s): c.value for (g, s), c in zip(self.keys, self.components)}

    def fill(self, name: str, values: Mapping[str, Any], config_cls: type) -> list[Any]:
        """One update per component (as `components` are ordered): the group `name`'s inputs get
        `values`, or their default where `values` has none; every other group is left alone."""
        defaults = {i.name: i.default for i in describe(config_cls)}
        return [gr.update(value=values.get(setting, defaults.get(setting))) if group == name else gr.skip()
                for group, setting in self.keys]

    def show_only(self, name: str) -> list[Any]:
        return [gr.update(visible=(g == name)) for g in self.groups]
