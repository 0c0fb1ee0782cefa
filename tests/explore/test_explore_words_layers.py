"""Issue 25, the Python half: which word each word piece belongs to, where a long text was truncated
(payload and command line), token kinds from labels, and ``--layers A-B``."""
import numpy as np
import pytest
from explore_runs import one_line_error
from page_payloads import build

from npformer.cli import main
from npformer.explore import payload as payload_mod
from npformer.explore.kinds import action_label, label_kinds
from npformer.explore.layers import keep_layers, parse_layers
from npformer.explore.payload import decode_array
from npformer.explore.words import truncation, word_index, word_labels
from oracles import minilm_dir


@pytest.fixture(scope="module")
def minilm():
    minilm_dir()                                                       # skips when the weights are missing
    return payload_mod.open_explorer("minilm")


TEXT = [{"text": "Tokenization is unbelievably hard."}]


@pytest.fixture(scope="module")
def full(minilm):
    return minilm.payload(TEXT)


def test_word_index_joins_continuation_pieces():
    pieces = ["[CLS]", "token", "##ization", "isn", "'", "t", "un", "##bel", "##iev", "##able", "[SEP]"]
    index = word_index(pieces)
    assert index == [0, 1, 1, 2, 3, 4, 5, 5, 5, 5, 6]                   # counted by hand
    assert word_labels(pieces, index) == ["[CLS]", "tokenization", "isn", "'", "t", "unbelievable", "[SEP]"]
    assert word_index(["[CLS]", "##x", "[SEP]"]) == [0, 1, 2]          # a '##' piece never joins a special token


def test_word_index_reads_byte_level_pieces():
    # RoBERTa's byte-level BPE marks a word's first piece with 'G' (U+0120) instead of marking continuations
    pieces = ["<s>", "Hello", "\u0120wor", "ld", "\u0120!", "</s>"]
    index = word_index(pieces)
    assert index == [0, 1, 2, 2, 3, 4]
    assert word_labels(pieces, index) == ["<s>", "Hello", "world", "!", "</s>"]


def test_minilm_payload_says_which_pieces_form_which_word(full):
    p = full
    g = p["inputs"][0]["groups"][0]
    assert g["query_tokens"] == ["[CLS]", "token", "##ization", "is", "un", "##bel", "##ie", "##va", "##bly", "hard",
                                 ".", "[SEP]"]
    assert g["word_index"]["query"] == [0, 1, 1, 2, 3, 3, 3, 3, 3, 4, 5, 6] == g["word_index"]["key"]
    assert g["word_labels"]["query"] == ["[CLS]", "tokenization", "is", "unbelievably", "hard", ".", "[SEP]"]
    assert p["inputs"][0]["truncated"] is None


def test_truncation_says_where_the_text_was_cut(minilm):
    from npformer.pretrained.tokenizer import WordPieceTokenizer

    tok = WordPieceTokenizer(minilm_dir() / "tokenizer.json", 8)
    text = "The quick brown fox jumps over the lazy dog again."
    pieces, spans = tok.tokens([text])[0], tok.spans([text])[0]
    assert pieces == ["[CLS]", "the", "quick", "brown", "fox", "jumps", "over", "[SEP]"]
    t = truncation(text, spans, pieces, 8)
    kept = text.index("over") + len("over")
    assert (t["kept_chars"], t["dropped_chars"]) == (kept, len(text) - kept)
    assert (t["after_piece"], t["after_index"]) == ("over", 6)
    assert f"dropped the last {len(text) - kept} of {len(text)} characters" in t["note"]
    short = "the quick fox"
    assert truncation(short, tok.spans([short])[0], tok.tokens([short])[0], 8) is None


def test_the_command_says_on_stderr_that_it_truncated(minilm, monkeypatch, tmp_path, capsys):
    from npformer.pretrained.tokenizer import WordPieceTokenizer

    monkeypatch.setattr(minilm.encoder, "tokenizer", WordPieceTokenizer(minilm_dir() / "tokenizer.json", 8))
    monkeypatch.setattr(payload_mod, "open_explorer", lambda source: minilm)
    out = tmp_path / "long.html"
    assert main(["explore", "minilm", "The quick brown fox jumps over the lazy dog again.", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    one_line_error(err, "input 1 truncated", "up to piece 6 'over'", "dropped the last")
    assert "dropped the last" in out.read_text(encoding="utf-8")


def test_label_kinds():
    labels = ["PICK", "PLACE", "put", "<pad>", "p(0,1)", "p(10,3)", "[CLS]", "<bos>", "<", "p", "[PAD]"]
    assert label_kinds(labels) == ["action", "action", "word", "pad", "patch", "patch", "special", "special",
                                   "word", "word", "pad"]


def test_action_token_labels():
    """A policy that acts in tokens: its words, patches and action tokens (act:NAME) are told apart."""
    labels = ["put", "the", "<pad>", "p(0,0)", action_label("BOS"), action_label("dx=3"), action_label("close"),
              "act:", "act"]
    assert labels[4:7] == ["act:BOS", "act:dx=3", "act:close"]
    assert label_kinds(labels) == ["word", "word", "pad", "patch", "action", "action", "action", "word", "word"]
    with pytest.raises(ValueError, match="without spaces"):
        action_label("dx 3")


@pytest.mark.parametrize("text, expect", [("0-1", (0, 1)), ("2", (2, 2)), (" 3-5 ", (3, 5))])
def test_parse_layers(text, expect):
    assert parse_layers(text) == expect


@pytest.mark.parametrize("bad", ["", "a-b", "1-", "-1", "2-1", "1-2-3", "1.5"])
def test_parse_layers_refuses(bad):
    with pytest.raises(ValueError, match="--layers"):
        parse_layers(bad)


def test_keep_layers_cuts_every_per_layer_array():
    full, _ = build("dates")
    cut, _ = build("dates")
    keep_layers(cut, 1, 1)
    for g0, g1 in zip(full["inputs"][0]["groups"], cut["inputs"][0]["groups"], strict=True):
        assert g1["layers"] == [1] and g1["n_layers"] == 1
        for name in ("q", "k", "v", "weights", "rollout"):
            if g0[name] is not None:
                np.testing.assert_array_equal(decode_array(g1[name]), decode_array(g0[name])[1:2])
                assert ("codec" in g1[name]) == ("codec" in g0[name])
        assert g1["stats"] == {k: v[1:2] for k, v in g0["stats"].items()}
        assert g1["relevance"] == g0["relevance"]
    np.testing.assert_array_equal(decode_array(cut["training"]["weights"]),
                                  decode_array(full["training"]["weights"])[:, 1:2])
    with pytest.raises(ValueError, match="has layers 0-1"):
        keep_layers(build("dates")[0], 0, 2)


def test_minilm_layers_keep_rollout_and_relevance_of_the_whole_model(minilm, full, monkeypatch):
    monkeypatch.setattr(minilm, "layers", (4, 5))
    cut = minilm.payload(TEXT)
    g0, g1 = full["inputs"][0]["groups"][0], cut["inputs"][0]["groups"][0]
    assert g1["layers"] == [4, 5] and g1["n_layers"] == 2
    np.testing.assert_array_equal(decode_array(g1["q"]), decode_array(g0["q"])[4:6])
    np.testing.assert_array_equal(decode_array(g1["rollout"]), decode_array(g0["rollout"])[4:6])
    for t in g0["relevance"]:
        np.testing.assert_array_equal(decode_array(g1["relevance"][t]), decode_array(g0["relevance"][t]))


@pytest.mark.parametrize("layers, fragment", [("x", "--layers must be A-B"), ("3-1", "A <= B")])
def test_bad_layers_one_line_exit_2(layers, fragment, capsys, tmp_path):
    assert main(["explore", "minilm", "a cat", "--layers", layers, "--out", str(tmp_path / "x.html")]) == 2
    one_line_error(capsys.readouterr().err, fragment)


def test_layers_beyond_the_model_one_line_exit_2(minilm, monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(payload_mod, "open_explorer", lambda source: minilm)
    assert main(["explore", "minilm", "cat", "--layers", "5-6", "--out", str(tmp_path / "x.html")]) == 2
    one_line_error(capsys.readouterr().err, "--layers 5-6", "layers 0-5")
    assert not (tmp_path / "x.html").exists()
