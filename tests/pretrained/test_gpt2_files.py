"""A GPT-2 directory's files: the tokenizer in both layouts against transformers' and tokenizers' own ids,
generate's str and list forms, the checks at CausalLM's boundary, and the refusals (a pickle, an
unsupported activation, a missing tokenizer, a config the weights do not match), each one line and
exit code 2 at ``npformer generate``."""
import contextlib
import io
import json
import shutil

import numpy as np
import pytest

from oracles import require

require("torch")
transformers = require("transformers")

from tiny_gpt2 import write_gpt2  # noqa: E402

from npformer.cli import main  # noqa: E402
from npformer.pretrained import ByteBPETokenizer, CausalLM  # noqa: E402
from npformer.settings import FileFormatError  # noqa: E402

TEXTS = ["the cat sat on the mat", " leading space and  two", "café über naïve 日本 — 42!", "line\nbreak\n\n",
         "unseen words: zebra quokka", ""]


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    """One tiny GPT-2 saved with all three tokenizer files."""
    d = tmp_path_factory.mktemp("gpt2_both")
    write_gpt2(d, n_positions=64, layout="both")
    return d


def _only(src, dst, keep):
    dst.mkdir()
    for name in ("config.json", "model.safetensors", *keep):
        shutil.copy(src / name, dst / name)
    return dst


def _cli(*argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(list(argv))
    return rc, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("layout", ["json", "files"])
def test_tokenizer_ids_and_round_trip_match_transformers_and_tokenizers(both, tmp_path, layout):
    from tokenizers import ByteLevelBPETokenizer, Tokenizer

    keep = ("tokenizer.json",) if layout == "json" else ("vocab.json", "merges.txt")
    d = _only(both, tmp_path / layout, keep)
    ours = ByteBPETokenizer(d)
    theirs = transformers.AutoTokenizer.from_pretrained(str(d))
    own = (Tokenizer.from_file(str(d / "tokenizer.json")) if layout == "json"
           else ByteLevelBPETokenizer(str(d / "vocab.json"), str(d / "merges.txt")))
    for text in TEXTS:
        ids = ours.encode(text)
        assert ids == theirs.encode(text, add_special_tokens=False), text
        assert ids == own.encode(text).ids, text
        assert ours.decode(ids) == text
    assert len(ours.encode(TEXTS[0])) < len(TEXTS[0].encode())         # merges were applied, not bytes alone


def test_generate_returns_text_for_text_and_ids_for_ids(both):
    lm = CausalLM.load(both)
    text = lm.generate("the cat", 5)
    ids = lm.generate(lm.tokenizer.encode("the cat"), 5)
    assert isinstance(text, str) and isinstance(ids, list) and all(type(i) is int for i in ids)
    assert 1 <= len(ids) <= 5                                            # stops early only at <|endoftext|>
    assert text == lm.tokenizer.decode(ids)
    assert len(ids) == 5 or ids[-1] == lm.eos_id


def test_sampling_is_reproducible_from_the_seed_and_top_k_1_is_greedy(both):
    lm = CausalLM.load(both)
    prompt = lm.tokenizer.encode("the dog ran")
    a = lm.generate(prompt, 12, temperature=1.5, seed=7)
    assert a == lm.generate(prompt, 12, temperature=1.5, seed=7)
    draws = {tuple(lm.generate(prompt, 12, temperature=1.5, seed=s)) for s in range(6)}
    assert len(draws) > 1                                                # the seed matters
    assert lm.generate(prompt, 12, temperature=1.0, top_k=1, seed=3) == lm.generate(prompt, 12)


def test_eos_stops_generation(both):
    lm = CausalLM.load(both)
    assert lm.eos_id == lm.tokenizer._tok.token_to_id("<|endoftext|>")     # config.json's eos_token_id
    first, *rest = lm.generate([1, 2, 3], 10)
    assert first != lm.eos_id and len(rest) >= 2
    lm.eos_id = first                                                    # the greedy first token ends the text
    assert lm.generate([1, 2, 3], 10) == [first]


@pytest.mark.parametrize("ids, error, match", [
    (np.zeros((1, 3), dtype=np.float32), TypeError, "integer token ids"),
    (np.zeros(3, dtype=np.int64), ValueError, r"shape \(batch, length\)"),
    (np.zeros((1, 0), dtype=np.int64), ValueError, r"shape \(batch, length\)"),
    (np.full((1, 3), 10 ** 6), ValueError, "outside the vocabulary"),
    (np.full((1, 3), -1), ValueError, "outside the vocabulary"),
    (np.zeros((1, 65), dtype=np.int64), ValueError, "n_positions 64"),
])
def test_logits_checks_its_ids(both, ids, error, match):
    with pytest.raises(error, match=match):
        CausalLM.load(both).logits(ids)


@pytest.mark.parametrize("kwargs, match", [
    (dict(prompt=""), "prompt is empty"),
    (dict(prompt=[]), "prompt is empty"),
    (dict(prompt=[1, 10 ** 6]), "outside the vocabulary"),
    (dict(prompt=b"bytes"), "str or a list of int"),
    (dict(prompt="the", max_new_tokens=0), "max_new_tokens"),
    (dict(prompt="the", temperature=-1.0), "temperature"),
    (dict(prompt="the", top_k=0), "top_k"),
    (dict(prompt=[1] * 60, max_new_tokens=6), "n_positions 64: at most 5 new tokens"),
])
def test_generate_checks_its_arguments(both, kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        CausalLM.load(both).generate(**kwargs)


def test_npformer_generate_prints_the_prompt_and_the_greedy_continuation(both):
    rc, out, err = _cli("generate", str(both), "--prompt", "the cat", "--tokens", "6")
    assert rc == 0, err
    assert out == "the cat" + CausalLM.load(both).generate("the cat", 6) + "\n"


def _edit_config(d, **changes):
    cfg = json.loads((d / "config.json").read_text())
    cfg.update(changes)
    (d / "config.json").write_text(json.dumps(cfg))


def _refusal(d, error, match):
    with pytest.raises(error, match=match):
        CausalLM.load(d)
    rc, out, err = _cli("generate", str(d), "--prompt", "the cat")
    assert rc == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    return err


def test_a_pickle_alone_is_refused_with_how_to_convert(both, tmp_path):
    d = _only(both, tmp_path / "bin", ("tokenizer.json",))
    (d / "model.safetensors").unlink()
    (d / "pytorch_model.bin").write_bytes(b"never unpickled")
    err = _refusal(d, FileNotFoundError, "pytorch_model.bin, a pickle")
    assert "save_pretrained" in err and "safetensors" in err


@pytest.mark.parametrize("changes, match", [
    (dict(activation_function="relu"), "activation_function 'relu' is not supported"),
    (dict(n_embd=64), "does not match config.json"),
    (dict(scale_attn_by_inverse_layer_idx=True), "scale_attn_by_inverse_layer_idx"),
    (dict(model_type="gpt_neo"), "model_type 'gpt_neo' is not 'gpt2'"),
])
def test_configs_npformer_does_not_run_are_refused(both, tmp_path, changes, match):
    d = _only(both, tmp_path / "cfg", ("tokenizer.json",))
    _edit_config(d, **changes)
    with pytest.raises(ValueError, match=match):
        CausalLM.load(d)
    rc, _, err = _cli("generate", str(d), "--prompt", "the cat")
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_a_missing_tokenizer_names_the_files_wanted(both, tmp_path):
    d = _only(both, tmp_path / "notok", ("vocab.json",))                 # merges.txt missing too
    err = _refusal(d, FileNotFoundError, "no tokenizer")
    assert "tokenizer.json" in err and "vocab.json and merges.txt" in err


def test_a_broken_merges_file_is_one_line(both, tmp_path):
    d = _only(both, tmp_path / "badmerges", ("vocab.json", "merges.txt"))
    (d / "merges.txt").write_text("#version: 0.2\na b c\n")
    _refusal(d, FileFormatError, "merges.txt")


@pytest.mark.parametrize("config, argv, match", [
    ({"model_type": "bert"}, (), "model_type 'bert' is not a causal language model"),
    ({"task": "text"}, (), "--tokens N is required for a run directory"),          # an npformer run: no model_type
    ({"model_type": ["gpt2"]}, ("--tokens", "3"), "model_type must be a name"),
])
def test_generate_on_other_directories_is_one_line(tmp_path, config, argv, match):
    (tmp_path / "config.json").write_text(json.dumps(config))
    rc, out, err = _cli("generate", str(tmp_path), "--prompt", "the cat", *argv)
    assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert match in err


def _resave(src, dst, edit):
    """dst: src's directory with model.safetensors's tensors passed through ``edit(dict) -> dict``."""
    from safetensors.numpy import load_file, save_file

    d = _only(src, dst, ("tokenizer.json",))
    save_file(edit(load_file(str(d / "model.safetensors"))), str(d / "model.safetensors"))
    return d


def _gpt2model_layout(tensors):
    """GPT2Model's names (no "transformer." prefix), the causal-mask buffers older checkpoints saved, and
    GPT2LMHeadModel's lm_head beside them, equal to wte as tied weights are."""
    out = {k.removeprefix("transformer."): v for k, v in tensors.items()}
    n_layer = 1 + max(int(k.split(".")[1]) for k in out if k.startswith("h."))
    for i in range(n_layer):
        out[f"h.{i}.attn.bias"] = np.tril(np.ones((64, 64), dtype=np.float32))[None, None]
        out[f"h.{i}.attn.masked_bias"] = np.asarray(-1e4, dtype=np.float32)
    out["lm_head.weight"] = out["wte.weight"].copy()
    return out


def test_the_other_checkpoint_layout_loads_the_same_model(both, tmp_path):
    d = _resave(both, tmp_path / "gpt2model", _gpt2model_layout)
    ids = np.random.default_rng(0).integers(0, 300, size=(2, 9))
    np.testing.assert_array_equal(CausalLM.load(d).logits(ids), CausalLM.load(both).logits(ids))


@pytest.mark.parametrize("edit, match", [
    (lambda t: {**_gpt2model_layout(t), "lm_head.weight": _gpt2model_layout(t)["wte.weight"] + 1}, "differs from wte"),
    (lambda t: {k: v for k, v in t.items() if not k.endswith("h.1.mlp.c_fc.bias")}, "missing weight"),
    (lambda t: {**t, "transformer.h.2.ln_1.weight": t["transformer.ln_f.weight"]}, "unexpected weight"),
    (lambda t: {**t, "transformer.wpe.weight": t["transformer.wpe.weight"][:32]}, "does not match config.json"),
    (lambda t: {**t, "transformer.ln_f.bias": t["transformer.ln_f.bias"].astype(np.int32)}, "has dtype I32"),
])
def test_weights_that_do_not_fit_are_refused_by_name(both, tmp_path, edit, match):
    d = _resave(both, tmp_path / "bad", edit)
    with pytest.raises(FileFormatError, match=match):
        CausalLM.load(d)
