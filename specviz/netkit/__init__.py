"""The draft-network kit: what GLIDE (glide/), Medusa and Hydra (heads/), EAGLE and EAGLE-3
(eagle/) and MTP (mtp/) share.

- files.py: checkpoint files: atomic writes, reading without running code, versioned manifests;
- checkpoint.py: a checkpoint checked against its module and its target (fingerprint, sizes,
  the model it names, weights' shapes and values before anything is allocated);
- fields.py: a checkpoint's config fields read with bounds, and its rotary embedding's parameters;
- shortlist.py: an LM head made of a shortlist of the target's rows;
- data.py: training text and chat conversations (the loss on the assistant turns, a fixed
  held-out split) -> token windows -> batches;
- target_pass.py: what the frozen target gives a training step (a disk cache of it; the feature
  heads' online pass);
- recipe.py: the training recipe (schedule, optimiser step, resume, Ctrl-C save; the replay of a
  target cache; the online loop that trains several heads on one target pass a batch);
- distill.py: self-distillation, the target's own answers as training data.
"""
