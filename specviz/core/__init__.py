"""The data every layer shares, with no model in it: the draft tree (tree, flat_tree), decoding
settings (decoding), the settings kit (settings), the trace and what is measured from it (trace,
draft_metrics, position_metrics, calibration), phase timing (timing) and the device and dtype
names (precision)."""
