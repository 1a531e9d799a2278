"""What drafters share, as opposed to the methods in specviz/drafters/: the protocol and registry
(base), NAME@PRESET[k=v] choices (choice), entry-point plugins (plugins), what a drafter keeps
across generations (store), trust-learned tree sizing (sizing, tree_cutter), the corpus index
settings (corpus_index), the model drafters' draft model (draft_lm), chain loop (chain), draft
length (gamma) and base class (model_drafter), and the suffix tree's history of earlier outputs
(suffix_history)."""
