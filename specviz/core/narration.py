"""What a drafter's part of a step's story is made of: the narrator a DrafterSpec declares
(`DrafterSpec.narrate`) and the pieces of its sentences, which the explainer
(specviz/viz/narrative.py) renders from a Trace alone.

    narrate(Scene(step, committed, drafter, config)) -> StepStory(source=..., size=..., passes=...)

A drafter knows what it wrote into `StepRecord.info`, so it tells where its draft came from and
why its tree has its size; the explainer tells what every step has (the target's verdict, the
bonus token, the passes saved, the engine's pad rows) and renders the pieces: plain text as
it is (it is text, not Markdown: values from the step's info or the drafter's settings, which a
trace file can set to anything, are shown literally), a `Code` as a name set as code, a `Quote`
as the tokens' text in quotes, a `Place` as where those positions lie (the user's context with
the text around it, the output so far, the chat template). No drafter imports the explainer
and the explainer names no drafter.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from .trace import StepRecord


@dataclass(frozen=True)
class Quote:
    """Tokens, told as their text in quotes."""
    ids: tuple[int, ...]


@dataclass(frozen=True)
class Place:
    """Positions [start, end) of the committed sequence (prompt + output), told as where they lie."""
    start: int
    end: int


@dataclass(frozen=True)
class Code:
    """A name (the drafter's, a draft model's), told as code."""
    text: str


Piece = str | Quote | Place | Code
Sentence = tuple[Piece, ...]          # pieces told one after another ("" between them)


@dataclass(frozen=True)
class Scene:
    """What a narrator sees of one step: its record and the run around it."""
    step: StepRecord
    committed: tuple[int, ...]         # the run's prompt ids, then its output ids
    drafter: str                       # the drafter's name, as the trace records it
    config: Mapping[str, Any]          # the drafter's settings in this run (Trace.drafter_config)


@dataclass(frozen=True)
class StepStory:
    """A drafter's part of a step's story (the explainer tells the rest)."""
    source: tuple[Sentence, ...] = ()  # where the draft came from
    size: tuple[Sentence, ...] = ()    # why the tree has the size it has
    passes: tuple[Sentence, ...] = ()  # the drafter's own forward passes (a draft model's), after the saved ones


Narrator = Callable[[Scene], StepStory]


def untold(scene: Scene) -> StepStory:
    """The narrator of a drafter that declares none: the explainer's shorter account."""
    return StepStory()


def plural(n: int, word: str, many: str | None = None) -> str:
    """'1 token', '3 tokens' ('1 pass', '2 passes' with many='passes')."""
    return f"{n} {word if n == 1 else (many or word + 's')}"


def were(n: int) -> str:
    return "was" if n == 1 else "were"
