"""FR-Spec's token maps: the target's most frequent tokens, to which a draft head's LM head is cut
(Zhao et al. 2025, "FR-Spec: Accelerating Large-Vocabulary Language Models via Frequency-Ranked
Speculative Sampling"; the authors' code: FlagAI-Open/FlagAI examples/FR-Spec, `fr/fr.py`; SGLang's
`--speculative-token-map`).

A token map is a `.pt` file holding a list (or a 1-D tensor) of distinct token ids, most frequent
first: `freq_{K}.pt`, the file `fr.py` writes (its K ids, the end-of-sequence token put in when
the counts leave it out) and SGLang's `load_token_map` reads. FR-Spec keeps it beside the head's
weights (the `--eagle-path` folder; thunlp/LLaMA3-Instruct-8B-FR-Spec), SGLang takes a path or
`owner/name/file.pt` on the model hub. Its first K ids are the draft vocabulary.

- `read(source, vocab)`: a map from a path or hub file, checked (one line naming the file when it is
  not a list of distinct ids of the target's vocabulary);
- `find(folder, want)`: the `freq_{K}.pt` beside a head's weights that best serves `want` tokens;
- `ranked(counts, k, eos)` / `write(folder, ids)`: making one (`specviz token-map`).
Reading never runs code a file carries (`torch.load(weights_only=True)`).
"""
from __future__ import annotations

import re
from pathlib import Path

import torch

from .files import CheckpointError, load_torch_file, user_path

FILE_PATTERN = re.compile(r"^freq_(\d+)\.pt$")     # FR-Spec's name for a map of K ids


def file_name(k: int) -> str:
    return f"freq_{k}.pt"


def _hub_file(source: str) -> Path:
    """owner/name/path/to/file.pt on the model hub, fetched (SGLang's reading of a map it cannot
    find on disk: the folder part is the repository)."""
    parts = source.split("/")
    repo, name = "/".join(parts[:2]), "/".join(parts[2:])
    try:
        from huggingface_hub import hf_hub_download
        return Path(hf_hub_download(repo, name))
    except Exception as err:  # noqa: BLE001 - no network, no such repo or file: one line
        first = str(err).splitlines()[0][:160] if str(err) else ""
        raise CheckpointError(f"token map: {source!r} is no local file, and fetching {name!r} from {repo!r} on the "
                              f"model hub failed ({type(err).__name__}: {first}); pass a local file") from None


def read(source: str | Path, vocab: int) -> torch.Tensor:
    """The token ids of a map [N] (long, most frequent first), from a local `.pt` file or
    `owner/name/file.pt` on the model hub. CheckpointError naming the file when it is missing,
    unreadable, empty, not a list of integers, repeats an id or names one outside [0, vocab)."""
    text = str(source)
    path = user_path(text, "token map")
    if not path.exists():
        if len(text.split("/")) >= 3 and not text.startswith((".", "~", "/")):
            path = _hub_file(text)
        else:
            raise CheckpointError(f"token map: no such file {text!r} (FR-Spec's freq_K.pt: a list of token ids, "
                                  "most frequent first; or owner/name/freq_K.pt on the model hub)")
    if path.is_dir():
        raise CheckpointError(f"token map: {text!r} is a folder; give its freq_K.pt file")
    data = load_torch_file(path)
    where = repr(text)
    if isinstance(data, torch.Tensor):
        if data.dim() != 1 or data.dtype.is_floating_point or data.dtype == torch.bool:
            raise CheckpointError(f"token map: {where} holds a {data.dtype} tensor of shape {list(data.shape)}; "
                                  "a map is a 1-D list of integer token ids")
        ids = data.long()
    elif isinstance(data, (list, tuple)):
        if not all(isinstance(t, int) and not isinstance(t, bool) for t in data):
            raise CheckpointError(f"token map: {where} holds a list that is not all integers; a map is a list of "
                                  "token ids, most frequent first")
        ids = torch.tensor(list(data), dtype=torch.long)
    else:
        raise CheckpointError(f"token map: {where} holds a {type(data).__name__}; a map is a list of token ids, "
                              "most frequent first (FR-Spec's fr.py writes one with torch.save)")
    if not ids.numel():
        raise CheckpointError(f"token map: {where} holds no token ids")
    if int(ids.min()) < 0 or int(ids.max()) >= vocab:
        raise CheckpointError(f"token map: {where} names token ids outside the target's vocabulary of {vocab} "
                              f"(from {int(ids.min())} to {int(ids.max())}): a map made for another model")
    if ids.unique().numel() != ids.numel():
        raise CheckpointError(f"token map: {where} repeats token ids ({ids.numel() - ids.unique().numel()} "
                              "repeated); a map lists each token once")
    return ids


def find(folder: Path | None, want: int) -> Path | None:
    """The `freq_{K}.pt` in `folder` to take `want` ids from: the smallest K >= want, else the
    largest there is; None when the folder holds none."""
    if folder is None or not folder.is_dir():
        return None
    sizes = sorted(int(m.group(1)) for p in folder.iterdir() if (m := FILE_PATTERN.match(p.name)))
    if not sizes:
        return None
    k = next((s for s in sizes if s >= want), sizes[-1])
    return folder / file_name(k)


def ranked(counts: torch.Tensor, k: int, eos: int | None) -> list[int]:
    """The k most frequent ids of `counts` [V] (ties by id), the end-of-sequence id `eos` put in
    last when the counts leave it out (fr.py does the same: a draft must be able to end)."""
    return first_of(counts.argsort(descending=True, stable=True), k, eos)


def first_of(order: torch.Tensor, k: int, eos: int | None) -> list[int]:
    """The first k ids of a ranking `order` [V] (train-eagle's vocab.pt), `eos` put in last when
    they leave it out."""
    ids = [int(t) for t in order[:k].tolist()]
    if eos is not None and 0 <= eos < len(order) and eos not in ids:
        ids = ids[: k - 1] + [eos]
    return ids


def write(folder: str | Path, ids: list[int]) -> Path:
    """freq_{len(ids)}.pt in `folder` (a list of ints, as fr.py saves it), written whole or not at all."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / file_name(len(ids))
    tmp = path.with_suffix(".tmp")
    torch.save([int(t) for t in ids], tmp)
    tmp.replace(path)
    return path
