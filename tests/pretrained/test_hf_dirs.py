"""A plain Hugging Face directory (config.json with a model_type, model.safetensors, tokenizer.json, no
modules.json) wherever MiniLM works: SentenceEncoder.load, embed and similar (each saying its pooling in
one line on stderr) and explore; and its refusals, one line with exit 2: pytorch_model.bin alone (with how
to convert it, never opened), sharded weights, an unsupported model_type, a missing file, a bad config.json.
The directory is made with numpy (tests/hf_dirs.py); parity with transformers is test_hf_bert.py's."""
import json

import numpy as np
import pytest

from hf_dirs import write_plain_bert
from npformer.cli import main
from npformer.pretrained import SentenceEncoder
from npformer.settings import FileFormatError

TEXTS = ["a robot picks up the red block", "the weather is nice today", "a man plays a guitar"]
POOLING = "pooling: mean over pieces, not normalised (a plain Hugging Face bert directory)"


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    return write_plain_bert(tmp_path_factory.mktemp("plain") / "my-bert")


def cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def mean_pooled(enc, texts):
    """The reference: the padded forward's last hidden states, averaged over each text's real pieces."""
    ids, mask = enc.tokenizer.pad(enc.tokenizer.encode(texts))
    h, _ = enc.model.forward(ids, mask)                                    # (B, T, E)
    m = mask[..., None].astype(np.float64)                                  # (B, T, 1)
    return (h * m).sum(1) / m.sum(1)                                       # (B, E)


def test_loads_as_mean_pooling_without_normalisation(plain):
    enc = SentenceEncoder.load(plain)
    assert enc.plain and enc.pool_modes == ["mean_tokens"] and not enc.normalize
    assert enc.dim == 12 and enc.tokenizer.max_length == 24 == enc.model.config.max_position_embeddings
    emb = enc.encode(TEXTS)
    np.testing.assert_allclose(emb, mean_pooled(enc, TEXTS), rtol=0, atol=1e-5)
    assert not np.allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-3)      # not normalised
    long = enc.tokenizer.encode([" ".join(["block"] * 100)])[0]
    assert len(long) == 24 and long[-1] == 3                                 # cut at the table, [SEP] kept
    assert enc.describe_pooling() == POOLING[len("pooling: "):]


def test_a_sentence_transformers_directory_is_not_plain(tmp_path):
    from tiny_bert import write_model
    enc = SentenceEncoder.load(write_model(tmp_path / "st"))
    assert not enc.plain and enc.normalize
    assert enc.describe_pooling() == "mean over pieces, normalised (as the directory's modules.json says)"


def test_embed_says_its_pooling_on_stderr(plain, tmp_path, capsys):
    src = tmp_path / "in.txt"
    src.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    code, out, err = cli(capsys, "embed", "--model", plain, "--output", tmp_path / "e.npy", src)
    assert code == 0 and err.splitlines() == [POOLING], err
    assert out.strip() == f"wrote 3 x 12 float32 embeddings to {tmp_path / 'e.npy'}"
    np.testing.assert_allclose(np.load(tmp_path / "e.npy"), SentenceEncoder.load(plain).encode(TEXTS),
                               rtol=0, atol=1e-6)


def test_similar_says_its_pooling_on_stderr(plain, tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    code, out, err = cli(capsys, "similar", "--model", plain, "--corpus", corpus, "--no-cache", "--top-k", "3",
                         "a robot picks up the red block")
    assert code == 0 and err.splitlines() == [POOLING.replace("not normalised", "normalised")], err
    first = out.splitlines()[1].split()
    assert first[1:3] == ["line", "1:"] and abs(float(first[0]) - 1.0) < 1e-4     # the query itself, cosine 1


def test_explore_writes_a_page_here_not_in_the_model_directory(plain, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    before = sorted(p.name for p in plain.iterdir())
    code, out, err = cli(capsys, "explore", plain, "a robot picks up the red block")
    assert code == 0, err
    assert out.strip() == "explore.html" and (tmp_path / "explore.html").stat().st_size > 0
    assert sorted(p.name for p in plain.iterdir()) == before


def test_explorer_payload_of_a_plain_directory(plain):
    from npformer.explore.payload import open_explorer

    payload = open_explorer(plain).payload([{"text": "the red block"}, {"text": "a blue box"}])
    assert payload["model"] == {"kind": "bert", "d_model": 12, "n_heads": 3, "head_dim": 4, "norm": "post"}
    assert payload["title"] == "my-bert"
    inp = payload["inputs"][0]
    assert [t["name"] for t in inp["targets"]] == ["[CLS]", "mean pooled"]
    assert inp["groups"][0]["query_tokens"] == ["[CLS]", "the", "red", "block", "[SEP]"]
    assert "cosine similarity" in inp["meta"]


def one_line(code, err, *words):
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    for w in words:
        assert w in lines[0], (w, lines[0])


def commands(model, tmp_path):
    """embed, similar and explore, each on ``model``."""
    src = tmp_path / "in.txt"
    src.write_text("a line\n", encoding="utf-8")
    return [("embed", "--model", model, "--output", tmp_path / "e.npy", src),
            ("similar", "--model", model, "--corpus", src, "--no-cache", "a line"),
            ("explore", model, "a line", "--out", tmp_path / "p.html")]


def test_pytorch_model_bin_alone_says_how_to_convert_it(plain, tmp_path, capsys):
    d = tmp_path / "pickled"
    d.mkdir()
    for name in ("config.json", "tokenizer.json"):
        (d / name).write_bytes((plain / name).read_bytes())
    (d / "pytorch_model.bin").write_bytes(b"\x80\x04 not read")
    with pytest.raises(FileNotFoundError) as e:
        SentenceEncoder.load(d)
    assert "\n" not in str(e.value)
    for argv in commands(d, tmp_path):
        code, _, err = cli(capsys, *argv)
        one_line(code, err, "pytorch_model.bin", "a pickle", "never loads", f"AutoModel.from_pretrained('{d}')",
                 f".save_pretrained('{d}', safe_serialization=True)")


def test_sharded_weights_are_refused(plain, tmp_path, capsys):
    d = tmp_path / "sharded"
    d.mkdir()
    for name in ("config.json", "tokenizer.json"):
        (d / name).write_bytes((plain / name).read_bytes())
    (d / "model.safetensors.index.json").write_text("{}")
    code, _, err = cli(capsys, *commands(d, tmp_path)[0])
    one_line(code, err, "sharded", "model.safetensors.index.json")


@pytest.mark.parametrize("kind", ["xlnet", "gpt2", "t5"])
def test_an_unsupported_model_type_is_one_line_naming_it(plain, tmp_path, capsys, kind):
    d = write_plain_bert(tmp_path / kind)
    (d / "config.json").write_text(json.dumps({**json.loads((plain / "config.json").read_text()),
                                               "model_type": kind, "architectures": ["Other"]}))
    with pytest.raises(ValueError, match=f"model_type '{kind}'"):
        SentenceEncoder.load(d)
    for argv in commands(d, tmp_path)[:2] + ([] if kind == "gpt2" else commands(d, tmp_path)[2:]):
        code, _, err = cli(capsys, *argv)
        one_line(code, err, f"model_type '{kind}'", "config.json")


@pytest.mark.parametrize("missing", ["model.safetensors", "tokenizer.json"])
def test_a_missing_file_is_one_line_naming_it(plain, tmp_path, capsys, missing):
    d = write_plain_bert(tmp_path / "m")
    (d / missing).unlink()
    for argv in commands(d, tmp_path):
        code, _, err = cli(capsys, *argv)
        one_line(code, err, missing, str(d))


@pytest.mark.parametrize("text,words", [("{not json", "config.json"), ('{"model_type": 7}', "model_type must be")])
def test_a_bad_config_is_one_line_naming_it(tmp_path, capsys, text, words):
    d = write_plain_bert(tmp_path / "bad")
    (d / "config.json").write_text(text)
    with pytest.raises(FileFormatError):
        SentenceEncoder.load(d)
    for argv in commands(d, tmp_path):
        code, _, err = cli(capsys, *argv)
        one_line(code, err, words, str(d / "config.json"))


def test_a_minilm_copy_without_modules_json_is_plain_and_mean_pooled(tmp_path):
    """MiniLM's real weights as a plain directory: its embeddings are the sentence-transformers pipeline's
    before the L2 norm (MiniLM pools by the mean too)."""
    from oracles import minilm_dir, place_file
    src = minilm_dir()
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        place_file(tmp_path / name, src / name)
    enc = SentenceEncoder.load(tmp_path)
    ref = SentenceEncoder.load(src).encode(TEXTS, normalize=False)
    assert enc.plain and enc.tokenizer.max_length == 512
    np.testing.assert_allclose(enc.encode(TEXTS), ref, rtol=0, atol=1e-6)


def test_distilbert_and_roberta_configs_map_onto_berts():
    from npformer.pretrained import BertConfig

    c = BertConfig.from_dict({"model_type": "distilbert", "vocab_size": 10, "dim": 8, "n_heads": 2, "hidden_dim": 16,
                              "activation": "relu", "max_position_embeddings": 12, "dtype": "float32"})
    assert (c.hidden_size, c.num_attention_heads, c.intermediate_size, c.hidden_act) == (8, 2, 16, "relu")
    assert (c.num_hidden_layers, c.type_vocab_size, c.layer_norm_eps, c.torch_dtype) == (6, 1, 1e-12, "float32")
    assert "embeddings.token_type_embeddings.weight" not in dict(c.checkpoint_shapes())
    r = BertConfig.from_dict({"model_type": "roberta", "vocab_size": 10, "hidden_size": 8, "num_attention_heads": 2,
                              "max_position_embeddings": 14, "pad_token_id": 1, "type_vocab_size": 1})
    assert (r.max_position_embeddings, r.position_offset) == (12, 2)
    assert dict(r.checkpoint_shapes())["embeddings.position_embeddings.weight"] == (14, 8)


@pytest.mark.parametrize("cfg,words", [
    ({"model_type": "roberta", "pad_token_id": None}, "a roberta encoder needs pad_token_id"),
    ({"model_type": "roberta", "pad_token_id": 1, "max_position_embeddings": 2}, "above pad_token_id + 1 (2"),
    ({"model_type": "bert", "hidden_act": "gelu_new"}, "hidden_act 'gelu_new' is not supported"),
    ({"model_type": "distilbert", "activation": "silu"}, "hidden_act 'silu' is not supported"),
    ({"model_type": "bert", "position_embedding_type": "relative_key"}, "position_embedding_type 'relative_key'"),
])
def test_what_the_loader_cannot_map_is_refused(cfg, words):
    from npformer.pretrained import BertConfig

    with pytest.raises(ValueError, match=None) as e:
        BertConfig.from_dict({"vocab_size": 10, "hidden_size": 8, "num_attention_heads": 2, **cfg})
    assert words in str(e.value)


@pytest.mark.parametrize("value,shown", [(["bert"], "model_type ['bert']"), ("x" * 100, "model_type '" + "x" * 39)])
def test_a_model_type_that_is_no_name_is_refused_by_the_loader(value, shown):
    from npformer.pretrained import BertConfig

    with pytest.raises(ValueError) as e:
        BertConfig.from_dict({"vocab_size": 10, "model_type": value})
    assert shown in str(e.value) and "not a BERT-family encoder" in str(e.value) and len(str(e.value)) < 200
