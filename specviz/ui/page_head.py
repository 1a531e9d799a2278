"""The page's <head> (LAUNCH_OPTIONS["head"]): the explorer's browser side, all of it in
static/explorer.js (stepping, Play, the jumps and their keys, the ← → keys, figures fitted to
their boxes), and what it must know of the page, as data: `window.specviz.config`
(inspector.browser_config: the step views by name, the controls' ids, the jump keys).
No JavaScript is written here."""
from __future__ import annotations

import json
from importlib.resources import files
from pathlib import Path
from typing import Any


def explorer_js() -> str:
    """The browser side of the explorer (specviz/ui/static/explorer.js)."""
    return files("specviz.ui").joinpath("static", "explorer.js").read_text(encoding="utf-8")


def plotly_module() -> str | None:
    """The file of gradio's front end that holds plotly.js (assets/PlotlyPlot-HASH.js), or None.
    gradio loads it only when a plot first shows, after the page's data has arrived; the page
    imports it at once instead (explorer.js), beside its own start."""
    try:
        import gradio
        found = sorted((Path(gradio.__file__).parent / "templates" / "frontend" / "assets").glob("PlotlyPlot-*.js"))
    except (ImportError, OSError):
        return None
    return f"assets/{found[0].name}" if len(found) == 1 else None


def head(config: dict[str, Any]) -> str:
    """The <head> scripts: the page's config for explorer.js, then explorer.js."""
    config = {**config, "plotly_module": plotly_module()}
    # "</" could end the <script> element early: JSON allows it written as "<\/"
    data = json.dumps(config).replace("</", "<\\/")
    return (f"<script>window.specviz = window.specviz || {{}}; window.specviz.config = {data};</script>\n"
            f"<script>{explorer_js()}</script>\n")
