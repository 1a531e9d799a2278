"""What drafters share, as opposed to the methods in specviz/drafters/: the protocol and registry
(base), NAME@PRESET[k=v] choices (choice), entry-point plugins (plugins), what a drafter keeps
across generations (store), trust-learned tree sizing (sizing, tree_cutter), the corpus index
settings (corpus_index), the chain loop of model drafters (chain) and the suffix tree's history
of earlier outputs (suffix_history)."""
