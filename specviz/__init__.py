"""specviz: see, teach and debug speculative decoding.

    from specviz import load_model, build_prompt, generate, DRAFTERS
    lm = load_model("embedded")
    trace = generate(lm, build_prompt(lm.tokenizer, "Summarise:", context=doc), "ngram_trie")
"""
__version__ = "0.9.0"

from .decoding import DecodingConfig
from .drafters import REGISTRY as DRAFTERS
from .engine import build_trace, generate, generate_steps
from .errors import SpecvizError
from .models import load_model
from .prompts import Prompt, build_prompt
from .trace import StepRecord, Trace
from .tree import DraftTree

__all__ = ["__version__", "DRAFTERS", "DecodingConfig", "DraftTree", "Prompt", "SpecvizError", "StepRecord",
           "Trace", "build_prompt", "build_trace", "generate", "generate_steps", "load_model"]
