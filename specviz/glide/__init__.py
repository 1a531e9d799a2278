"""GLIDE: the draft model that glimpses the target's KV cache (model), its checkpoints and
training (`python -m specviz train-glide`), and CAPE, the paper's proposal expansion (cape).
The training data, the target's pass and the recipe it shares with heads/ and eagle/ are in
specviz/netkit/."""
