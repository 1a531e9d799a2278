"""specviz: see, teach and debug speculative decoding.

    from specviz import load_model, build_prompt, generate, DRAFTERS
    lm = load_model("embedded")
    trace = generate(lm, build_prompt(lm.tokenizer, "Summarise:", context=doc), "ngram_trie")
"""
__version__ = "0.10.0"

from . import old_paths

old_paths.install()        # 0.9's module paths (specviz.verify, specviz.drafters.base, ...) for one release

from .core.decoding import DecodingConfig
from .drafters import REGISTRY as DRAFTERS
from .engine import build_trace, generate, generate_steps
from .errors import SpecvizError
from .models import load_model
from .models.prompts import Prompt, build_prompt
from .core.trace import StepRecord, Trace
from .core.tree import DraftTree

__all__ = ["__version__", "DRAFTERS", "DecodingConfig", "DraftTree", "Prompt", "SpecvizError", "StepRecord",
           "Trace", "build_prompt", "build_trace", "generate", "generate_steps", "load_model"]
