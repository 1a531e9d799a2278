"""Token text for any tokenizer: the pieces shown per token join to the output text exactly.

Two tokenizer families: byte-level BPE (the embedded SmolLM2 tokenizer: spaces inside tokens,
characters split over tokens) and SentencePiece-style Metaspace (Llama-2, Mistral, Gemma: "▁"
marks a word start, and a lone "▁the" decodes to "the"). The Metaspace tokenizer and a tiny
random Llama over its vocabulary are built here, offline, in a second.
"""
from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from specviz import viz
from specviz.models.cost import calibrate
from specviz.core.decoding import DecodingConfig
from specviz.engine import generate
from specviz.errors import ModelLoadError
from specviz.models import LoadedModel, tiny_random_model
from specviz.models.prompts import build_prompt
from specviz.models.token_pieces import PieceStream, incremental_pieces, token_labels
from specviz.core.trace import Trace

SENTENCES = ["the cat sat on the mat", "the dog sat on the log", "a cat and a dog ran",
             "on the mat the cat sat", "Once upon a time, a dog sat on a log."]


@pytest.fixture(scope="module")
def metaspace_tok():
    """A Llama-2-style tokenizer: BPE over Metaspace pre-tokens, <unk> <s> </s> first."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tk = Tokenizer(models.BPE(unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tk.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    trainer = trainers.BpeTrainer(vocab_size=150, special_tokens=["<unk>", "<s>", "</s>"], show_progress=False)
    tk.train_from_iterator(SENTENCES * 4, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<s>", eos_token="</s>", unk_token="<unk>")


@pytest.fixture(scope="module")
def metaspace_lm(metaspace_tok) -> LoadedModel:
    model = tiny_random_model(len(metaspace_tok), seed=3).eval()      # bos 1 = <s>, eos 2 = </s>
    return LoadedModel("tiny-metaspace", model, metaspace_tok, torch.device("cpu"), torch.float32,
                       4096, frozenset({2}), calibrate(model))


def test_metaspace_round_trip_keeps_the_spaces(metaspace_tok) -> None:
    text = "the cat sat on the mat"
    ids = metaspace_tok(text, add_special_tokens=False)["input_ids"]
    assert metaspace_tok.convert_ids_to_tokens(ids)[1].startswith("▁")
    # the bug this replaces: one id at a time, the words run together
    assert "".join(metaspace_tok.decode([i]) for i in ids) == "thecatsatonthemat"
    pieces = incremental_pieces(metaspace_tok, ids)
    assert pieces == ["the", " cat", " sat", " on", " the", " mat"]
    assert "".join(pieces) == text == metaspace_tok.decode(ids)
    # a draft node out of context is labelled with the space it carries
    assert token_labels(metaspace_tok, ids)[ids[1]] == " cat"


def test_byte_level_round_trip_across_split_characters(tiny_lm_tok) -> None:
    tok = tiny_lm_tok.tokenizer
    text = "Crème brûlée, 日本語 and 🙂 — done."
    ids = tok(text, add_special_tokens=False)["input_ids"]
    single = [tok.decode([i]) for i in ids]
    assert "".join(single) != text                      # a character split over tokens
    pieces = incremental_pieces(tok, ids)
    assert len(pieces) == len(ids) and "".join(pieces) == text
    assert "\ufffd" not in "".join(pieces)
    assert "" in pieces                                 # the first half of a split character waits


@pytest.mark.parametrize("chunks", [[1] * 40, [3, 5, 1, 7, 2, 30]])
def test_streamed_pieces_equal_the_whole(tiny_lm_tok, metaspace_tok, chunks) -> None:
    for tok, text in ((tiny_lm_tok.tokenizer, "Hé 日本 🙂 the end, okay?"), (metaspace_tok, " ".join(SENTENCES))):
        ids = tok(text, add_special_tokens=False)["input_ids"]
        stream, start = PieceStream(tok), 0
        for n in chunks:
            got = stream.extend(ids[start:start + n])
            assert len(got) == len(ids[start:start + n])
            start += n
        assert stream.pieces == incremental_pieces(tok, ids) and stream.text == tok.decode(ids)


def test_special_tokens_add_no_text_to_the_output(metaspace_tok) -> None:
    ids = metaspace_tok("the cat", add_special_tokens=False)["input_ids"] + [2]        # </s>
    assert incremental_pieces(metaspace_tok, ids) == ["the", " cat", ""]
    kept = incremental_pieces(metaspace_tok, [1] + ids, skip_special_tokens=False)
    assert "".join(kept) == metaspace_tok.decode([1] + ids, skip_special_tokens=False)


@pytest.mark.parametrize("drafter", ["vanilla", "prompt_lookup", "ngram_trie"])
def test_a_metaspace_model_trace_reproduces_its_text(metaspace_lm, drafter) -> None:
    tok = metaspace_lm.tokenizer
    prompt = build_prompt(tok, "the cat sat on the mat the cat sat on", chat=False)
    trace = generate(metaspace_lm, prompt, drafter, None, DecodingConfig(max_new_tokens=40))
    ids = list(trace.output_ids)
    assert trace.output_text == tok.decode(ids, skip_special_tokens=True)
    assert " " in trace.output_text                     # words, with their spaces
    assert "".join(tok.decode([i], skip_special_tokens=True) for i in ids) != trace.output_text
    spans = viz.output_spans(trace.steps, trace.output_pieces)
    assert [s.token for s in spans] == ids
    assert "".join(s.text for s in spans) == trace.output_text
    # the prompt's pieces place every token in the prompt text
    chars = viz.prompt_char_spans(trace.prompt_text, trace.prompt_pieces)
    assert len(chars) == len(trace.prompt_ids)
    words = [trace.prompt_text[a:b].strip() for a, b in chars if b > a]
    assert "".join(words) == trace.prompt_text.replace(" ", "")
    # each step's committed text, in its place
    assert "".join("".join(trace.step_pieces(k)) for k in range(len(trace.steps))) == trace.output_text
    assert [len(trace.step_pieces(k)) for k in range(len(trace.steps))] == [len(s.new_tokens) for s in trace.steps]
    assert Trace.from_json(trace.to_json()) == trace


def test_a_model_that_rejects_the_4d_mask_is_named(metaspace_lm) -> None:
    class NoTreeMaskLM(type(metaspace_lm.model)):
        def forward(self, *args, attention_mask=None, **kwargs):
            if attention_mask is not None and attention_mask.dim() == 4:
                raise ValueError("Attention mask should be of size (batch, seq_len)")
            return super().forward(*args, attention_mask=attention_mask, **kwargs)

    model = NoTreeMaskLM(metaspace_lm.model.config).eval()
    lm = dataclasses.replace(metaspace_lm, model=model)
    prompt = build_prompt(lm.tokenizer, "the cat sat", chat=False)
    with pytest.raises(ModelLoadError, match=r"NoTreeMaskLM rejected the 4-D attention mask.*Attention mask should"):
        generate(lm, prompt, "vanilla", None, DecodingConfig(max_new_tokens=4))


def test_a_schema_1_trace_still_reads(tiny_lm_tok) -> None:
    """Traces written before per-position pieces: their per-id text stands in."""
    prompt = build_prompt(tiny_lm_tok.tokenizer, "Say hi.")
    trace = generate(tiny_lm_tok, prompt, "vanilla", None, DecodingConfig(max_new_tokens=6))
    old = trace.to_dict()
    for key in ("output_pieces", "prompt_pieces"):
        old.pop(key)
    old["schema_version"] = 1
    back = Trace.from_json(json.dumps(old))
    assert back.output_pieces == tuple(trace.token_text[i] for i in trace.output_ids)
    assert len(back.prompt_pieces) == len(trace.prompt_ids) and back.schema_version == 2
