"""Module paths from before the layer folders (0.9), kept importable for one release (removed in
0.11). `import specviz.verify` or `from specviz.drafters.base import DrafterSpec` still works, warns
once with a DeprecationWarning naming the new path, and gives the very module at the new path (one
module object: state, monkeypatches and isinstance checks are shared).

A module that was split (SPLIT: `specviz.drafters.chain`, whose concerns now live in
drafters/kit/draft_lm.py, chain.py, gamma.py, model_drafter.py, glide/cape.py and the GLIDE
drafter) gives a module of its own holding each public name it had, taken from the name's new
home (the objects are shared; the old module's own globals are not).

Installed by specviz/__init__.py as a finder on sys.meta_path; it answers for the names below only.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from types import ModuleType

REMOVED_IN = "0.11"

MOVED: dict[str, str] = {f"specviz.{old}": f"specviz.{new}" for old, new in {
    # file plumbing
    "user_files": "files.user_files", "json_schema": "files.json_schema", "jsonl": "files.jsonl",
    "cachedir": "files.cachedir", "resources": "files.resources",
    # the core's data
    "tree": "core.tree", "flat_tree": "core.flat_tree", "decoding": "core.decoding", "settings": "core.settings",
    "trace": "core.trace", "timing": "core.timing", "precision": "core.precision",
    "draft_metrics": "core.draft_metrics", "position_metrics": "core.position_metrics",
    "calibration": "core.calibration",
    # the target model
    "embedded": "models.embedded", "cpu_linear": "models.cpu_linear", "prompts": "models.prompts",
    "token_pieces": "models.token_pieces", "placement": "models.placement", "kvcache": "models.kvcache",
    "hidden": "models.hidden", "cost": "models.cost",
    # the engine (specviz.engine and specviz.models are packages now and re-export their old names)
    "verify": "engine.verify", "accept": "engine.accept",
    # the drafters' shared kit
    "drafters.base": "drafters.kit.base", "drafters.plugins": "drafters.kit.plugins",
    "drafters.choice": "drafters.kit.choice", "drafters.store": "drafters.kit.store",
    "drafters.tree_cutter": "drafters.kit.tree_cutter", "drafters.corpus_index": "drafters.kit.corpus_index",
    "drafters.suffix_history": "drafters.kit.suffix_history",
    "sizing": "drafters.kit.sizing",
    # analysis, and the web policy beside the UI
    "divergence": "analysis.divergence", "doctor": "analysis.doctor", "landing_check": "analysis.landing_check",
    "server_metrics": "analysis.server_metrics", "web_policy": "ui.web_policy",
}.items()}

# old path -> {public name it had: the module that holds it now}
SPLIT: dict[str, dict[str, str]] = {"specviz.drafters.chain": {
    **dict.fromkeys(("DraftLM", "hf_forward", "HFDraftLM"), "specviz.drafters.kit.draft_lm"),
    **dict.fromkeys(("PROPOSAL", "ChainResult", "ChainLoop"), "specviz.drafters.kit.chain"),
    **dict.fromkeys(("GAMMA_UP", "GAMMA_DOWN", "adapt_gamma", "GammaSettings"), "specviz.drafters.kit.gamma"),
    **dict.fromkeys(("step_info", "accepted_proposals", "ModelDrafter"), "specviz.drafters.kit.model_drafter"),
    **dict.fromkeys(("EXPANSION", "MAX_CAPE_EXTRA", "parse_bins", "expansion_size", "cap_expansions"),
                    "specviz.glide.cape"),
    **dict.fromkeys(("BEAM", "TreeDraftLM"), "specviz.drafters.glide"),
}}


class OldPathFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old path and loads it as the module at its new path."""

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED and fullname not in SPLIT:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return None

    def exec_module(self, module: ModuleType) -> None:
        if module.__name__ in SPLIT:
            homes = SPLIT[module.__name__]
            warnings.warn(f"{module.__name__} was split into {', '.join(sorted(set(homes.values())))}; "
                          f"the old path goes in specviz {REMOVED_IN}", DeprecationWarning, stacklevel=2)
            for name, home in homes.items():
                setattr(module, name, getattr(importlib.import_module(home), name))
            return
        old, new = module.__name__, MOVED[module.__name__]
        warnings.warn(f"{old} moved to {new}; the old path goes in specviz {REMOVED_IN}",
                      DeprecationWarning, stacklevel=2)
        # the import system returns what sys.modules holds for the name after this call
        sys.modules[old] = importlib.import_module(new)


def install() -> None:
    if not any(isinstance(f, OldPathFinder) for f in sys.meta_path):
        sys.meta_path.append(OldPathFinder())
