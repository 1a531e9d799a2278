"""The authors' own code as benchmark peers, driven by specviz's engine loop.

A peer here drafts with another project's implementation of a method (an optional package that
is not a requirement of specviz) inside specviz's own engine: the same verify forward, the same
acceptance, the same timers, so only the drafting code differs from the specviz drafter it stands
beside (`counterpart`). Its DrafterSpec is not registered: the explorer and `specviz drafters`
never list it; `specviz bench --peers NAME` runs it (bench/methods.py), and its greedy output is
checked against the baseline's like every method's.

A peer whose package is missing is listed all the same, and `spec()` raises PeerUnavailable
with how to get it (benchmarks/README.md, section "The authors' code as peers").
"""
from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass

from ..drafters.kit.base import DrafterSpec
from ..errors import SpecvizError

BUILD_DOC = "benchmarks/README.md"


class PeerUnavailable(SpecvizError):
    """An engine peer's package is not installed here."""


@dataclass(frozen=True)
class EnginePeer:
    name: str
    summary: str
    package: str                 # the importable module the peer needs (e.g. "arctic_inference")
    distribution: str            # its name on the package registry, with the version it was built from
    module: str                  # specviz.peers submodule holding SPEC (imported only when available)
    counterpart: str             # the specviz drafter label with the same settings, to run beside it

    def available(self) -> bool:
        return importlib.util.find_spec(self.package) is not None

    def why_unavailable(self) -> str:
        return (f"peer {self.name!r} needs {self.distribution}, built as {BUILD_DOC} says "
                f"(section \"The authors' code as peers\"); {self.package!r} is not importable here")

    def spec(self) -> DrafterSpec:
        """The peer's (unregistered) DrafterSpec; PeerUnavailable where its package is missing."""
        if not self.available():
            raise PeerUnavailable(self.why_unavailable())
        return importlib.import_module(f"{__name__}.{self.module}").SPEC


ENGINE_PEERS: dict[str, EnginePeer] = {p.name: p for p in (
    EnginePeer("arctic_suffix",
               "arctic-inference's SuffixDecodingCache (the authors' SuffixDecoding, as vLLM's suffix "
               "method calls it) drafting in specviz's engine loop",
               "arctic_inference", "arctic-inference 0.3.0", "arctic_suffix",
               "suffix_decoding[max_depth=24;max_spec_tokens=24;use_tree=false;global_tree=true;"
               "size_by_cost=false;history_tokens=10000000]"),
    EnginePeer("draftretriever_aded",
               "draftretriever's Reader (the authors' ADED retriever: tri-gram table and MCTS, Rust) "
               "drafting in specviz's engine loop, over a datastore built from the same corpus index",
               "draftretriever", "draftretriever 0.1.1", "draftretriever_aded", "aded@paper"),
)}
