"""GLIDE: the draft model that glimpses the target's KV cache (model), its checkpoints, data
and training (`python -m specviz train-glide`), the training kit the heads' trainers share too
(train_kit), and CAPE, the paper's proposal expansion (cape)."""
