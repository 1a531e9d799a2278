"""MTP (multi-token prediction) modules: the module built from the target's own layer class
(model.py), where each publisher puts it in a checkpoint (layouts.py) and reading it from there or
from specviz's own files (checkpoint.py); the drafter is specviz/drafters/mtp.py (docs/mtp.md)."""

KIND = "mtp"      # the drafter and train-eagle kind these modules are (drafters/mtp.py, mtp/train.py)
