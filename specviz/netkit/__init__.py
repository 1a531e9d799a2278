"""The draft-network kit: what GLIDE (glide/), Medusa and Hydra (heads/), EAGLE and EAGLE-3
(eagle/) and MTP (mtp/) share.

- files.py: checkpoint files: atomic writes, reading without running code, versioned manifests;
- checkpoint.py: a checkpoint checked against its module and its target (fingerprint, sizes,
  the model it names, weights' shapes and values before anything is allocated);
- fields.py: a checkpoint's config fields read with bounds, and its rotary embedding's parameters;
- shortlist.py: an LM head made of a shortlist of the target's rows.
"""
