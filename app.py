"""specviz explorer (Gradio): watch, step through, compare and export speculative decoding.

    python app.py            # or `make demo`; GRADIO_SERVER_NAME / GRADIO_SERVER_PORT are honoured

The page is built without loading a model; the first run loads it (`specviz.load_model`
caches it, so later runs reuse it). On a ZeroGPU Space the default model is loaded here, at
import, outside the GPU window (specviz/ui/gpu.py). The page itself lives in specviz/ui/; this
file is the Hugging Face Space entry point (`app_file: app.py`).
"""
from __future__ import annotations

import os

# a page never builds the default corpus index (about 4 minutes) inside a run: a corpus
# drafter without one says which `python -m specviz index build` command makes it
os.environ.setdefault("SPECVIZ_BUILD_DEFAULT_INDEX", "0")

from specviz.ui import LAUNCH_OPTIONS, build_demo  # noqa: E402
from specviz.ui.gpu import preload_default_model  # noqa: E402
from specviz.ui.landing import warm_landing  # noqa: E402

preload_default_model()          # ZeroGPU only; elsewhere the first run loads the model
demo = build_demo()
warm_landing(demo.run_views)     # the recorded run's views, drawn once in the background for every visitor

if __name__ == "__main__":
    demo.launch(**LAUNCH_OPTIONS)  # GRADIO_SERVER_NAME / GRADIO_SERVER_PORT come from the environment
