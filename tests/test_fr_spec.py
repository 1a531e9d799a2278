"""FR-Spec's cut of the LM head (netkit/token_map.py; the eagle and mtp drafters' `hot_vocab` and
`token_map`): the map files as FR-Spec's fr.py writes them and SGLang reads them, refusals in one
line naming the file or the setting, drafts drawn from the hot tokens only, still lossless, and the
`specviz token-map` command."""
from __future__ import annotations

import json

import pytest
import torch

from specviz.drafters.kit.base import get
from specviz.errors import ConfigError
from specviz.netkit import token_map
from specviz.netkit.files import CheckpointError

from conftest import run_ids
from test_eagle import PROMPT, save_random
from test_mtp import save_random as save_random_mtp

V = 64                                   # the tiny model's vocabulary (conftest's tiny Llama)


def _map(folder, ids, name=None):
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / (name or token_map.file_name(len(ids)))
    torch.save(ids, path)
    return path


# ---- the files ----------------------------------------------------------------------------------

def test_a_map_reads_as_fr_py_writes_it_and_as_a_tensor(tmp_path):
    ids = [5, 3, 9, 1]
    assert token_map.read(_map(tmp_path, ids), V).tolist() == ids                      # a list (fr.py)
    assert token_map.read(_map(tmp_path, torch.tensor(ids, dtype=torch.int32), "t.pt"), V).tolist() == ids
    written = token_map.write(tmp_path / "w", ids)
    assert written.name == "freq_4.pt" and torch.load(written) == ids                 # a plain list of ints


@pytest.mark.parametrize("data, words", [
    ([1, 2, 2], "repeats"), ([1, V], "outside the target's vocabulary"), ([], "no token ids"),
    ([1.5, 2.0], "not all integers"), ({"ids": [1]}, "holds a dict"), ([True, False], "not all integers"),
    (torch.zeros(2, 2, dtype=torch.long), "1-D"), (torch.tensor([0.5]), "1-D list of integer")])
def test_a_bad_map_is_refused_naming_the_file(tmp_path, data, words):
    path = _map(tmp_path, data, "bad.pt")
    with pytest.raises(CheckpointError, match="token map") as err:
        token_map.read(path, V)
    assert words in str(err.value) and "bad.pt" in str(err.value)


def test_missing_foreign_and_folder_maps_are_refused(tmp_path, monkeypatch):
    import huggingface_hub

    def offline(repo, name):
        raise OSError(f"no network for {repo}/{name}")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", offline)
    with pytest.raises(CheckpointError, match="no such file"):
        token_map.read(tmp_path / "nope.pt", V)
    with pytest.raises(CheckpointError, match="is no local file, and fetching 'freq_8.pt' from 'no-such/repo'"):
        token_map.read("no-such/repo/freq_8.pt", V)                                   # the hub (offline here)
    with pytest.raises(CheckpointError, match="is a folder"):
        token_map.read(tmp_path, V)
    (tmp_path / "junk.pt").write_bytes(b"not a torch file")
    with pytest.raises(CheckpointError, match="junk.pt"):
        token_map.read(tmp_path / "junk.pt", V)


def test_find_takes_the_smallest_map_that_holds_enough(tmp_path):
    assert token_map.find(tmp_path, 8) is None and token_map.find(None, 8) is None
    for k in (4, 16, 32):
        _map(tmp_path, list(range(k)))
    assert token_map.find(tmp_path, 8).name == "freq_16.pt"
    assert token_map.find(tmp_path, 16).name == "freq_16.pt"
    assert token_map.find(tmp_path, 50).name == "freq_32.pt"                            # the largest there is


def test_ranked_keeps_the_end_of_sequence_token_as_fr_py_does():
    counts = torch.tensor([0, 9, 5, 7, 0, 3])
    assert token_map.ranked(counts, 3, None) == [1, 3, 2]
    assert token_map.ranked(counts, 3, 4) == [1, 3, 4]                                 # eos put in last
    assert token_map.ranked(counts, 3, 1) == [1, 3, 2]                                 # already there


# ---- drafting -----------------------------------------------------------------------------------

HOT = [0, 1, 2, 3, 4, 5, 7, 9, 13, 21, 30, 31, 40, 50]


@pytest.mark.parametrize("kind", ["eagle", "mtp"])
def test_drafts_come_from_the_hot_tokens_and_stay_lossless(tiny_lm, tmp_path, kind):
    folder = save_random(tiny_lm, "eagle", tmp_path / kind) if kind == "eagle" else \
        save_random_mtp(tiny_lm, tmp_path / kind)
    vanilla, _ = run_ids(tiny_lm, PROMPT, max_new_tokens=24)
    whole, steps = run_ids(tiny_lm, PROMPT, kind, {"checkpoint": folder}, max_new_tokens=24)
    assert whole == vanilla and all(s.info.get("hot_vocab") == 0 for s in steps if s.tree)   # no map: every token
    drafted = set()
    for source in ("beside", "given"):
        if source == "beside":
            _map(tmp_path / kind, HOT + [60, 61])                                       # freq_16.pt beside the weights
            cfg = {"checkpoint": folder, "hot_vocab": len(HOT)}
        else:
            cfg = {"checkpoint": folder, "hot_vocab": 64, "token_map": str(_map(tmp_path / "maps", HOT))}
        out, steps = run_ids(tiny_lm, PROMPT, kind, {**cfg, "size_by_cost": False}, max_new_tokens=24)
        assert out == vanilla, source
        assert {s.info["hot_vocab"] for s in steps if s.tree} == {len(HOT)}, source
        tokens = {t for s in steps for t in s.tree.tokens}
        assert tokens and tokens <= set(HOT), source
        drafted |= tokens
    assert len(drafted) > 1
    # the presets draft over the whole LM head, as the papers and the engines do
    preset = "paper" if kind == "eagle" else "sglang"
    _, steps = run_ids(tiny_lm, PROMPT, f"{kind}@{preset}", {"checkpoint": folder}, max_new_tokens=8)
    assert all(s.info["hot_vocab"] == 0 for s in steps if s.tree)


def test_a_bad_token_map_setting_names_the_setting(tiny_lm, tmp_path):
    folder = save_random(tiny_lm, "eagle", tmp_path / "e")
    bad = _map(tmp_path / "maps", [1, 2, 2], "bad.pt")
    for value, words in ((str(bad), "repeats"), (str(tmp_path / "none.pt"), "no such file")):
        with pytest.raises(ConfigError) as err:
            run_ids(tiny_lm, PROMPT, "eagle", {"checkpoint": folder, "token_map": value}, max_new_tokens=2)
        assert err.value.field == "token_map" and words in str(err.value)


def test_fr_spec_preset_cites_the_authors_scripts():
    preset = get("eagle").presets["fr-spec"]
    assert dict(preset.values) == {"total_tokens": 60, "depth": 5, "top_k": 10, "size_by_cost": False,
                                   "stop_early": False, "hot_vocab": 32768}
    assert "run_eagle_fr_spec.sh" in preset.source and "num_iter=6" in preset.source
    assert "hot_vocab" not in {f for f in get("eagle3").config_cls.__dataclass_fields__}   # its own vocabulary


def test_the_shipped_heads_carry_a_token_map():
    from specviz.eagle.checkpoint import default_checkpoint
    from specviz.mtp.checkpoint import default_checkpoint as mtp_default

    for folder in (default_checkpoint("eagle", "embedded"), mtp_default("embedded")):
        path = token_map.find(folder, 4096)
        assert path is not None and path.name == "freq_32768.pt", folder
        ids = token_map.read(path, 49152)
        assert len(ids) == 32768 and 2 in ids[:4096].tolist()                         # <|im_end|> among the 4,096


# ---- the command --------------------------------------------------------------------------------

def test_token_map_command(tmp_path, capsys):
    from specviz.cli import main

    data = tmp_path / "talk.jsonl"
    rows = [{"id": f"c{i}", "conversations": [{"from": "human", "value": "say the numbers"},
                                              {"from": "gpt", "value": " ".join(str(j % 7) for j in range(i, i + 60))}]}
            for i in range(300)]
    data.write_text("\n".join(json.dumps(r) for r in rows))
    out = tmp_path / "maps"
    assert main(["token-map", "--model", "tiny-random", "--data", str(data), "--sizes", "8,16", "--windows", "20",
                 "--seq-len", "64", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "freq_8.pt: 8 tokens" in printed and "freq_16.pt: 16 tokens" in printed
    eight, sixteen = token_map.read(out / "freq_8.pt", 1 << 20), token_map.read(out / "freq_16.pt", 1 << 20)
    assert len(eight) == 8 and sixteen[:7].tolist() == eight[:7].tolist()            # one ranking
    assert main(["token-map", "--model", "tiny-random", "--data", str(data), "--sizes", "0", "--out", str(out)]) == 2
    assert "--sizes" in capsys.readouterr().err
    assert main(["token-map", "--model", "tiny-random", "--data", str(data), "--out", str(data)]) == 2
    assert "--out" in capsys.readouterr().err and not (tmp_path / "talk.jsonl").is_dir()   # its input, untouched


def test_token_map_reads_the_tokenizer_and_config_only(tmp_path, monkeypatch, capsys):
    """The command counts tokens: it reads a target's tokenizer and its config's vocab_size, never
    its weights (a large target on a CPU would take minutes and its memory for nothing)."""
    import transformers

    from specviz.cli import main
    from specviz.errors import ModelLoadError
    from specviz.models import load_tokenizer
    from specviz.models import loading

    def no_weights(*a, **k):
        raise AssertionError("token-map loaded a model's weights")

    monkeypatch.setattr(loading, "load_model", no_weights)
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", no_weights)
    tok, rows = load_tokenizer("tiny-random")
    assert rows == len(tok)
    folder = tmp_path / "target"                           # a local folder: a config and a tokenizer, no weights
    transformers.LlamaConfig(vocab_size=rows + 64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                             num_attention_heads=2, num_key_value_heads=1).save_pretrained(folder)
    tok.save_pretrained(folder)
    assert load_tokenizer(str(folder))[1] == rows + 64     # the LM head's rows, padded past the tokenizer
    data = tmp_path / "talk.txt"
    data.write_text(" ".join(str(j % 7) for j in range(4000)))
    assert main(["token-map", "--model", str(folder), "--data", str(data), "--sizes", "8", "--windows", "4",
                 "--seq-len", "64", "--out", str(tmp_path / "maps")]) == 0
    assert len(token_map.read(tmp_path / "maps" / "freq_8.pt", rows + 64)) == 8
    with pytest.raises(ModelLoadError, match="no such directory"):
        load_tokenizer(str(tmp_path / "nowhere"))
    (tmp_path / "bare").mkdir()                            # a folder that is not a model: one line naming it
    assert main(["token-map", "--model", str(tmp_path / "bare"), "--data", str(data), "--out",
                 str(tmp_path / "maps")]) != 0
    err = capsys.readouterr().err
    assert "could not load" in err and "bare" in err and "Traceback" not in err


def test_the_narrative_says_how_many_tokens_a_head_drafted_among():
    from specviz.drafters.kit.narration import hot_vocab_note

    assert hot_vocab_note({"hot_vocab": 0}) == () and hot_vocab_note({}) == ()
    (sentence,) = hot_vocab_note({"hot_vocab": 4096})
    assert "4,096 most frequent tokens" in sentence[0] and "every token" in sentence[0]
