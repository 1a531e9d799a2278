"""The engine: the 7-step loop (loop.py), the tree forward and the acceptance judge (verify.py),
and the acceptance rules, greedy and speculative sampling (accept.py).

    from specviz.engine import generate, generate_steps
"""
from .loop import build_trace, check_fits, check_token_settings, generate, generate_steps, reference_config

__all__ = ["build_trace", "check_fits", "check_token_settings", "generate", "generate_steps", "reference_config"]
