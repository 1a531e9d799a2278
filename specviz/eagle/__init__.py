"""EAGLE and EAGLE-3 draft heads: the model (model.py), checkpoints in the published layouts
(checkpoint.py) and training (train.py); the drafters are specviz/drafters/eagle.py and eagle3.py."""
