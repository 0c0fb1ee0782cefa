"""The ``tokenizers`` library panics on some legal-looking files (a PanicException, which derives from
BaseException): a regex pre-tokenizer that backtracks past Oniguruma's retry limit, when a text is
encoded; a BPE merge whose result is missing from the vocabulary, when the model is built. Every call
goes through pretrained/tokenizers_lib.py, which makes either a FileFormatError naming the file: one
line and exit 2 on the command line. And the BERT-family tokenizer's ids, special tokens included, are
checked against the model's vocabulary at load."""
import ast
import json
from pathlib import Path

import pytest
from tiny_bert import CONFIG, write_model

import npformer
from npformer.cli import main
from npformer.pretrained import ByteBPETokenizer, CausalLM, SentenceEncoder
from npformer.settings import FileFormatError

BACKTRACKING = {"type": "Split", "pattern": {"Regex": "(a+)+$"}, "behavior": "Isolated", "invert": False}
HOSTILE_TEXT = "a" * 40 + "b"         # (a+)+$ tries 2^40 ways to split the a's before failing at the b


def _one_line_error(capfd, code, path) -> str:
    out, err = capfd.readouterr()
    assert code == 2, (out, err)
    assert len(err.strip().splitlines()) == 1 and str(path) in err, err
    assert "Traceback" not in err and "panicked at" not in err, err
    return err


@pytest.fixture
def backtracking_bert(tmp_path):
    model = write_model(tmp_path / "model")
    tok = json.loads((model / "tokenizer.json").read_text())
    tok["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [BACKTRACKING, tok["pre_tokenizer"]]}
    (model / "tokenizer.json").write_text(json.dumps(tok))
    return model


def test_a_regex_that_backtracks_is_a_file_format_error_when_encoding(backtracking_bert, tmp_path, capfd):
    enc = SentenceEncoder.load(backtracking_bert)                      # loads: the panic comes at encode
    assert enc.encode(["the cat sat"]).shape == (1, 8)
    with pytest.raises(FileFormatError, match="tokenizer.json") as e:
        enc.encode(["the cat sat", HOSTILE_TEXT])
    assert isinstance(e.value, Exception) and "panicked" in str(e.value)
    src = tmp_path / "in.txt"
    src.write_text(f"the cat sat\n{HOSTILE_TEXT}\n")
    capfd.readouterr()
    code = main(["embed", "--model", str(backtracking_bert), "--output", str(tmp_path / "o.npy"), str(src)])
    _one_line_error(capfd, code, backtracking_bert / "tokenizer.json")


def test_a_gpt2_tokenizer_json_that_backtracks_is_a_file_format_error(tmp_path):
    from tiny_bert import tokenizer_json
    tok = json.loads(tokenizer_json())
    tok["pre_tokenizer"], tok["post_processor"] = BACKTRACKING, None
    (tmp_path / "tokenizer.json").write_text(json.dumps(tok))
    bpe = ByteBPETokenizer(tmp_path)
    with pytest.raises(FileFormatError, match="tokenizer.json.*panicked"):
        bpe.encode(HOSTILE_TEXT)


@pytest.fixture
def merge_out_of_vocabulary(tmp_path):
    d = tmp_path / "gpt2"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"model_type": "gpt2", "vocab_size": 3, "n_embd": 8, "n_layer": 1,
                                               "n_head": 2, "n_positions": 16}))
    (d / "vocab.json").write_text(json.dumps({"a": 0, "b": 1, "c": 2}))
    (d / "merges.txt").write_text("#version: 0.2\na b\n")             # "ab" is not in the vocabulary
    return d


def test_a_merge_missing_from_the_vocabulary_is_a_file_format_error_when_loading(merge_out_of_vocabulary, capfd):
    d = merge_out_of_vocabulary
    with pytest.raises(FileFormatError, match="merges.txt.*panicked"):
        CausalLM.load(d)
    capfd.readouterr()
    code = main(["generate", str(d), "--prompt", "ab", "--tokens", "2"])
    _one_line_error(capfd, code, d / "merges.txt")


def test_a_special_token_id_outside_the_model_vocabulary_is_refused_at_load(tmp_path, capfd):
    model = write_model(tmp_path / "model")
    tok = json.loads((model / "tokenizer.json").read_text())
    tok["post_processor"]["special_tokens"]["[CLS]"]["ids"] = [40_000]
    tok["post_processor"]["single"][0]["SpecialToken"]["id"] = "[CLS]"
    (model / "tokenizer.json").write_text(json.dumps(tok))
    with pytest.raises(FileFormatError, match=r"tokenizer.json gives id 40,000, outside the model's vocabulary of "
                                              f"{CONFIG['vocab_size']}"):
        SentenceEncoder.load(model)
    src = tmp_path / "in.txt"
    src.write_text("the cat sat\n")
    capfd.readouterr()
    code = main(["embed", "--model", str(model), "--output", str(tmp_path / "o.npy"), str(src)])
    _one_line_error(capfd, code, model / "tokenizer.json")


def test_only_the_wrapper_module_imports_tokenizers():
    root = Path(npformer.__file__).parent
    importers = set()
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
            if any(n == "tokenizers" or n.startswith("tokenizers.") for n in names):
                importers.add(path.relative_to(root).as_posix())
    assert importers == {"pretrained/tokenizers_lib.py"}
