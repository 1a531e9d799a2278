"""Medusa-1 and Hydra draft heads: the model (model.py), checkpoints (checkpoint.py), training (train.py)."""
