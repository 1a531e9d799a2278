"""specviz explorer (Gradio): watch, step through, compare and export speculative decoding.

    python app.py            # or `make demo`; GRADIO_SERVER_NAME / GRADIO_SERVER_PORT are honoured

The page is built without loading a model; the first run loads it (`specviz.load_model`
caches it, so later runs reuse it). The page itself lives in specviz/ui/; this file is
the Hugging Face Space entry point (`app_file: app.py`).
"""
from __future__ import annotations

from specviz.ui import LAUNCH_OPTIONS, build_demo

demo = build_demo()

if __name__ == "__main__":
    demo.launch(**LAUNCH_OPTIONS)  # GRADIO_SERVER_NAME / GRADIO_SERVER_PORT come from the environment
