"""A model directory is someone else's: config.json's parameter count is computed before anything
is built, and the safetensors header alone is read and compared, tensor by tensor, with the config
before the model is built or any tensor is read. Every refusal is one line naming the file, and
exit code 2 on the command line. On the tiny generated model (tiny_bert.py)."""
import json
import struct

import numpy as np
import pytest
from tiny_bert import CONFIG, header_of, safetensors_bytes, weights, with_header, write_model

from npformer.cli import main
from npformer.pretrained import BertConfig, BertModel, SentenceEncoder
from npformer.pretrained import bert as bert_module
from npformer.settings import FileFormatError


@pytest.fixture
def model(tmp_path):
    return write_model(tmp_path / "model")


@pytest.fixture
def nothing_built(monkeypatch):
    """Fails the test if a BertModel is built or a tensor read."""
    def refuse(*a, **k):
        raise AssertionError("built or read before the files were checked")
    monkeypatch.setattr(bert_module, "BertModel", refuse)
    monkeypatch.setattr(bert_module, "read_tensors", refuse)


def embed(capsys, model, tmp_path):
    src = tmp_path / "in.txt"
    src.write_text("the cat sat\n")
    code = main(["embed", "--model", str(model), "--output", str(tmp_path / "o.npy"), str(src)])
    out, err = capsys.readouterr()
    return code, err


def test_the_tiny_model_loads_and_matches_its_weights(model):
    enc = SentenceEncoder.load(model)
    assert enc.encode(["the cat sat on the mat"]).shape == (1, 8)
    state = enc.model.state_dict()
    w = weights(CONFIG)
    np.testing.assert_array_equal(state["encoder.layers.1.ffn.linear2.weight"],
                                  w["encoder.layer.1.output.dense.weight"])
    np.testing.assert_array_equal(state["encoder.layers.0.self_attn.in_proj_bias"][8:16],
                                  w["encoder.layer.0.attention.self.key.bias"])


@pytest.mark.parametrize("config", [CONFIG, {**CONFIG, "num_hidden_layers": 3, "intermediate_size": 12},
                                    {**CONFIG, "vocab_size": 1000, "max_position_embeddings": 7, "type_vocab_size": 1}])
def test_param_count_is_the_built_models(config):
    cfg = BertConfig.from_dict(config)
    assert cfg.param_count() == BertModel(cfg).num_parameters()
    assert BertConfig.from_dict({**config, "model_type": "bert"}).param_count() == cfg.param_count()


@pytest.mark.parametrize("change,words", [
    ({"vocab_size": 2 ** 40}, "parameters, more than npformer builds"),
    ({"hidden_size": 2 ** 20, "num_attention_heads": 1}, "parameters, more than npformer builds"),
    ({"num_hidden_layers": 10 ** 6}, "at most 1,024 layers"),
    ({"vocab_size": "30522"}, "vocab_size must be an int"),
    ({"num_attention_heads": 0}, "num_attention_heads must be >= 1"),
    ({"layer_norm_eps": "tiny"}, "layer_norm_eps must be a number"),
    ({"torch_dtype": "bfloat16"}, "torch_dtype 'bfloat16' is not supported"),
    ({"architectures": "BertModel"}, "architectures must be a list"),
])
def test_an_absurd_or_mistyped_config_is_refused_before_building(model, tmp_path, capsys, nothing_built,
                                                                 change, words):
    (model / "config.json").write_text(json.dumps({**CONFIG, **change}))
    with pytest.raises(FileFormatError) as e:
        SentenceEncoder.load(model)
    assert words in str(e.value) and str(model / "config.json") in str(e.value)
    code, err = embed(capsys, model, tmp_path)
    assert code == 2 and words in err and len(err.strip().splitlines()) == 1, err


def _edit_header(model, edit):
    data = (model / "model.safetensors").read_bytes()
    header = header_of(data)
    edit(header)
    (model / "model.safetensors").write_bytes(with_header(data, header))


@pytest.mark.parametrize("case,words", [
    ("shape", "does not match config.json: encoder.layer.1.intermediate.dense.weight has shape (8, 16), "
              "the config gives (16, 8)"),
    ("dtype", "embeddings.word_embeddings.weight has dtype F64, expected F32"),
    ("missing", "missing weight 'encoder.layer.1.output.LayerNorm.bias'"),
    ("extra_layer", "unexpected weight 'encoder.layer.2.output.dense.bias' for a BERT encoder of 2 layers"),
    ("offsets", "data_offsets"),
    ("bad_dtype", "dtype 'F128' is not a safetensors dtype"),
])
def test_a_header_that_disagrees_with_the_config_is_refused_before_building(model, nothing_built, case, words):
    if case == "dtype":                                                # the config says float32
        (model / "config.json").write_text(json.dumps({**CONFIG, "torch_dtype": "float32"}))
        w = weights(CONFIG)
        w["embeddings.word_embeddings.weight"] = w["embeddings.word_embeddings.weight"].astype(np.float64)
        (model / "model.safetensors").write_bytes(safetensors_bytes(w))
    elif case == "shape":                                              # same bytes, transposed shape
        _edit_header(model, lambda h: h["encoder.layer.1.intermediate.dense.weight"].update(shape=[8, 16]))
    elif case == "missing":
        w = weights(CONFIG)
        del w["encoder.layer.1.output.LayerNorm.bias"]
        (model / "model.safetensors").write_bytes(safetensors_bytes(w))
    elif case == "extra_layer":
        w = weights(CONFIG)
        w["encoder.layer.2.output.dense.bias"] = np.zeros(8, np.float32)
        (model / "model.safetensors").write_bytes(safetensors_bytes(w))
    elif case == "offsets":
        _edit_header(model, lambda h: h["embeddings.LayerNorm.bias"].update(data_offsets=[0, 10 ** 12]))
    else:
        _edit_header(model, lambda h: h["embeddings.LayerNorm.bias"].update(dtype="F128"))
    with pytest.raises(FileFormatError) as e:
        SentenceEncoder.load(model)
    assert words in str(e.value) and str(model / "model.safetensors") in str(e.value), str(e.value)


@pytest.mark.parametrize("case,words", [
    ("short", "shorter than its 8-byte header length"),
    ("huge_header", "more than npformer reads"),
    ("past_end", "past the end of the"),
    ("nested", "deeper than 64 levels"),
    ("not_object", "must hold a JSON object"),
])
def test_a_malformed_header_is_one_line(model, tmp_path, capsys, nothing_built, case, words):
    f = model / "model.safetensors"
    data = f.read_bytes()
    if case == "short":
        f.write_bytes(data[:5])
    elif case == "huge_header":
        f.write_bytes(struct.pack("<Q", 2 ** 62) + data[8:])
    elif case == "past_end":
        f.write_bytes(data[:100])
    elif case == "nested":
        raw = b"[" * 100_000 + b"]" * 100_000
        f.write_bytes(struct.pack("<Q", len(raw)) + raw)
    else:
        f.write_bytes(struct.pack("<Q", 2) + b"[]")
    code, err = embed(capsys, model, tmp_path)
    assert code == 2 and words in err and str(f) in err and len(err.strip().splitlines()) == 1, err


def test_the_prefixed_gamma_beta_checkpoint_loads(model):
    """Old BERT checkpoints: weights under "bert." with LayerNorm gamma/beta, and a task head beside them."""
    w = {k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta"): v
         for k, v in weights(CONFIG, prefix="bert.").items()}
    w["cls.predictions.bias"] = np.zeros(CONFIG["vocab_size"], np.float32)
    (model / "model.safetensors").write_bytes(safetensors_bytes(w))
    ref = weights(CONFIG)
    got = SentenceEncoder.load(model).model.state_dict()
    np.testing.assert_array_equal(got["embeddings.LayerNorm.weight"], ref["embeddings.LayerNorm.weight"])


@pytest.mark.parametrize("file,content,words", [
    ("modules.json", json.dumps([{"type": "sentence_transformers.models.Transformer"},
                                 {"type": "sentence_transformers.models.Pooling", "path": "../../etc"}]),
     "is not a folder inside"),
    ("modules.json", "[1, 2]", "each module must be a JSON object"),
    ("sentence_bert_config.json", '{"max_seq_length": "256"}', "max_seq_length must be an int"),
    ("1_Pooling/config.json", '{"pooling_mode_mean_tokens": [[[]]]}', "pooling"),
    ("tokenizer.json", '{"version": "1.0", "model": 7}', "is not a tokenizer the tokenizers library reads"),
    ("config.json", '{"vocab_size": 1e999}', "number too large for a float"),
    ("config.json", '{"vocab_size": NaN}', "NaN"),
    ("config.json", '{"vocab_size": ' + "9" * 500 + "}", "a number of 500 characters"),
])
def test_the_pipeline_files_are_read_with_limits(model, tmp_path, capsys, file, content, words):
    (model / file).write_text(content)
    code, err = embed(capsys, model, tmp_path)
    assert code == 2 and words in err and str(model / file) in err and len(err.strip().splitlines()) == 1, err


def test_a_tokenizer_larger_than_the_table_is_refused(model, tmp_path, capsys):
    (model / "config.json").write_text(json.dumps({**CONFIG, "vocab_size": 10}))
    w = weights({**CONFIG, "vocab_size": 10})
    (model / "model.safetensors").write_bytes(safetensors_bytes(w))
    code, err = embed(capsys, model, tmp_path)
    assert code == 2 and "28 word pieces, more than the 10 rows" in err, err
