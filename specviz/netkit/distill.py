"""Self-distillation: the target's own answers to the ShareGPT prompts, as training data for its
draft heads (what EAGLE-3, HASS and SpecForge do: regenerate the responses with the target, so that
the head learns the text it will draft for). The command line is `python -m specviz distill`.

Each conversation's user turns are put to the target one after the other (at most `max_turns`),
each assistant turn regenerated from the conversation so far with the target's chat template and
the target's earlier answers; batched on any device (left padding, `batch` conversations at a
time, sorted by prompt length within a pool of POOL_BATCHES batches to waste little on padding),
greedy by default (or sampled at `temperature`), the target's decoder in `dtype` (bfloat16
autocast or float32; recorded). Each finished conversation is appended to a .jsonl file as a
ShareGPT-shaped record ({"id", "conversations": [{"from": "human"|"gpt", "value"}], "distill":
{...}}) that netkit/data.conversations reads, in one write: a run stopped by Ctrl-C or killed loses
only the batch in flight, and `distill` run again skips the ids the file holds (a last line cut
off by a kill is dropped first).
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

import torch

from ..errors import ConfigError, check_choice
from ..files.user_files import loads_json
from .data import Conversation, DataError, conversations, is_held_out

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

POOL_BATCHES = 8
SPLITS = ("train", "held-out", "all")
DTYPES = ("bfloat16", "float32")


@dataclass(frozen=True, kw_only=True)
class DistillConfig:
    batch: int = 16
    max_new_tokens: int = 256          # a turn's answer, at most
    max_turns: int = 1                 # user turns answered per conversation
    max_prompt_tokens: int = 1024      # a turn whose prompt is longer ends the conversation there
    temperature: float = 0.0           # 0: greedy
    dtype: str = "bfloat16"
    split: str = "train"
    max_conversations: int = 0         # 0: all
    seed: int = 0

    def check(self) -> None:
        check_choice("split", self.split, SPLITS)
        check_choice("dtype", self.dtype, DTYPES)
        for name, low, high in (("batch", 1, 4096), ("max_new_tokens", 1, 32768), ("max_turns", 1, 1000),
                                ("max_prompt_tokens", 1, 1 << 20), ("max_conversations", 0, 1 << 40)):
            value = getattr(self, name)
            if not low <= value <= high:
                raise ConfigError(name, f"must be a whole number from {low} to {high}, got {value}")
        if not 0 <= self.temperature <= 100:
            raise ConfigError("temperature", f"must be a number from 0 (greedy) to 100, got {self.temperature}")


@dataclass
class DistillStats:
    conversations: int = 0
    turns: int = 0
    new_tokens: int = 0
    prompt_tokens: int = 0
    seconds: float = 0.0
    skipped: int = 0                   # already in the file

    def tokens_per_second(self) -> float:
        return self.new_tokens / self.seconds if self.seconds else 0.0


def done_ids(path: Path) -> set[str]:
    """The conversation ids a .jsonl file of distilled records holds; a last line cut off by a
    kill (no newline, or not JSON) is removed from the file first. DataError for another file."""
    if not path.exists():
        return set()
    if not path.is_file():
        raise DataError(f"distill: --out {str(path)!r} is not a file")
    with path.open("rb+") as fh:
        data = fh.read()
        keep = data.rfind(b"\n") + 1
        if keep < len(data):                         # a cut-off last record
            fh.truncate(keep)
    ids: set[str] = set()
    for n, line in enumerate(data[:keep].splitlines(), 1):
        try:
            record = loads_json(line.decode("utf-8"), f"distill: {str(path)}:{n}", error=DataError,
                                hint="it is not a record distill wrote; give another --out")
        except UnicodeDecodeError:
            raise DataError(f"distill: {str(path)}:{n} is not a record distill wrote; give another --out") from None
        if not isinstance(record, dict) or "distill" not in record or not isinstance(record.get("id"), str):
            raise DataError(f"distill: {str(path)}:{n} is not a record distill wrote; give another --out")
        ids.add(record["id"])
    return ids


def _wanted(conv: Conversation, split: str) -> bool:
    return split == "all" or is_held_out(conv.id) == (split == "held-out")


def _user_turns(conv: Conversation) -> list[str]:
    return [m["content"] for m in conv.messages if m["role"] == "user"]


def _generate(target: PreTrainedModel, prompts: list[list[int]], cfg: DistillConfig, eos: list[int], pad: int
              ) -> list[tuple[list[int], bool]]:
    """Each prompt's answer (token ids, ended by an end token) from one batched, left-padded run."""
    device = next(target.parameters()).device
    width = max(map(len, prompts))
    ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    attn = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, width - len(p):] = torch.tensor(p)
        attn[i, width - len(p):] = 1
    sample = cfg.temperature > 0
    with torch.no_grad(), torch.autocast(device.type, dtype=torch.bfloat16, enabled=cfg.dtype == "bfloat16"):
        out = target.generate(input_ids=ids.to(device), attention_mask=attn.to(device), max_new_tokens=cfg.max_new_tokens,
                              do_sample=sample, **({"temperature": cfg.temperature, "top_k": 0, "top_p": 1.0}
                                                   if sample else {"temperature": None, "top_p": None, "top_k": None}),
                              eos_token_id=eos, pad_token_id=pad)
    answers = []
    for row in out[:, width:].tolist():
        cut = next((i for i, t in enumerate(row) if t in eos), None)
        answers.append((row[:cut + 1] if cut is not None else row, cut is not None))
    return answers


def _batches(convs: Iterator[Conversation], cfg: DistillConfig, first_len: Callable[[Conversation], int]
             ) -> Iterator[list[Conversation]]:
    pool: list[Conversation] = []
    for conv in convs:
        pool.append(conv)
        if len(pool) == cfg.batch * POOL_BATCHES:
            pool.sort(key=first_len)
            yield from (pool[i:i + cfg.batch] for i in range(0, len(pool), cfg.batch))
            pool = []
    pool.sort(key=first_len)
    yield from (pool[i:i + cfg.batch] for i in range(0, len(pool), cfg.batch))


def distill(target: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, model_id: str, source: str, out: str | Path,
            cfg: DistillConfig, log: Callable[[str], None] = print) -> DistillStats:
    """Regenerate the assistant turns of `source`'s conversations (cfg.split of them, those not yet
    in `out`) with the target; append each to `out`. Returns what it did."""
    cfg.check()
    out = Path(out).expanduser()
    done = done_ids(out)
    torch.manual_seed(cfg.seed)
    eos = sorted({t for t in (tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids("<|im_end|>")
                              if "<|im_end|>" in tokenizer.get_vocab() else None) if isinstance(t, int)})
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos[0]
    stats = DistillStats(skipped=len(done))
    wanted = (c for c in conversations(source) if _wanted(c, cfg.split) and c.id not in done and _user_turns(c))
    limit = cfg.max_conversations - len(done) if cfg.max_conversations else None
    if limit is not None and limit <= 0:
        return stats

    def prompt(history: list[dict[str, str]]) -> list[int]:
        return tokenizer(tokenizer.apply_chat_template(history, tokenize=False, add_generation_prompt=True),
                         add_special_tokens=False)["input_ids"]

    def first_len(conv: Conversation) -> int:
        return len(_user_turns(conv)[0])

    target.eval()
    setting = {"model": model_id, "dtype": cfg.dtype, "greedy": cfg.temperature == 0, "temperature": cfg.temperature,
               "max_new_tokens": cfg.max_new_tokens, "max_turns": cfg.max_turns}
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("a", encoding="utf-8") as fh:
        for batch in _batches(wanted, cfg, first_len):
            if limit is not None:
                batch = batch[:max(0, limit - stats.conversations)]
                if not batch:
                    break
            t0 = time.perf_counter()
            histories: list[list[dict[str, str]]] = [[] for _ in batch]
            ended = [False] * len(batch)
            finished: list[list[bool]] = [[] for _ in batch]
            for turn in range(cfg.max_turns):
                live, prompts = [], []
                for i, conv in enumerate(batch):
                    users = _user_turns(conv)
                    if ended[i] or turn >= len(users):
                        continue
                    p = prompt(histories[i] + [{"role": "user", "content": users[turn]}])
                    if len(p) > cfg.max_prompt_tokens:
                        ended[i] = True
                        continue
                    live.append(i)
                    prompts.append(p)
                if not live:
                    break
                for i, p, (answer, ok) in zip(live, prompts, _generate(target, prompts, cfg, eos, pad)):
                    text = tokenizer.decode([t for t in answer if t not in eos], skip_special_tokens=False)
                    histories[i] += [{"role": "user", "content": _user_turns(batch[i])[turn]},
                                     {"role": "assistant", "content": text}]
                    finished[i].append(ok)
                    stats.turns += 1
                    stats.new_tokens += len(answer)
                    stats.prompt_tokens += len(p)
            lines = []
            for conv, history, fin in zip(batch, histories, finished):
                if history:
                    turns = [{"from": "human" if m["role"] == "user" else "gpt", "value": m["content"]} for m in history]
                    lines.append(json.dumps({"id": conv.id, "conversations": turns,
                                             "distill": {**setting, "finished": fin}}, ensure_ascii=False) + "\n")
            fh.write("".join(lines))
            fh.flush()
            os.fsync(fh.fileno())
            stats.conversations += len(lines)
            stats.seconds += time.perf_counter() - t0
            log(f"distill: {stats.conversations} conversations, {stats.turns} turns, {stats.new_tokens} new tokens "
                f"({stats.tokens_per_second():.1f} tokens/s generated, batch {len(batch)} in "
                f"{time.perf_counter() - t0:.1f}s)")
    return stats
