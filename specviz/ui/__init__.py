"""The Gradio explorer, one module per tab or concern; `build_demo()` assembles the page.

Reads only Traces and StepRecords (pictures come from specviz.viz); the model runs through
specviz.engine's public functions. Per-session state lives in gr.State (ui/session.py).
"""
from .layout import LAUNCH_OPTIONS, build_demo

__all__ = ["LAUNCH_OPTIONS", "build_demo"]
