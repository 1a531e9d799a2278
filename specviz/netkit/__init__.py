"""The draft-network kit: what GLIDE, Medusa/Hydra, EAGLE/EAGLE-3 and MTP share: training data
(data), the frozen target's pass (target_pass), the training recipe (recipe) and self-distilled
data (distill); the checkpoint side (reading and checking against a target) lives here too."""
