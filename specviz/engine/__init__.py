"""The engine: the 7-step loop (loop.py), the tree forward and the acceptance judge (verify.py),
the acceptance rules, greedy and speculative sampling (accept.py), and the run service that
takes a front end's request to a Trace (service.py); several requests decoded together, one target
forward a step (batch.py).

    from specviz.engine import generate, generate_steps, generate_batch
    from specviz.engine import service          # service.run(service.RunRequest(...))
"""
from .batch import generate_batch
from .loop import build_trace, check_fits, check_token_settings, generate, generate_steps
from .service import reference_config

__all__ = ["build_trace", "check_fits", "check_token_settings", "generate", "generate_batch", "generate_steps",
           "reference_config"]
