"""translate / generate / attention commands on small untrained run directories."""
import numpy as np
import pytest

from npformer.cli import main
from npformer.data import get_task
from npformer.decode import greedy, strip_eos
from npformer.train.checkpoint import load_run
from npformer.train.trainer import TrainConfig, Trainer

TINY = {"d_model": 16, "n_heads": 2, "d_ff": 32}


@pytest.fixture(scope="module")
def dates_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "dates"
    task = get_task("dates").create()
    Trainer.start(task, {**TINY, "n_encoder_layers": 1, "n_decoder_layers": 2}, TrainConfig(steps=1), out)
    return out


@pytest.fixture(scope="module")
def text_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("runs")
    data = d / "book.txt"
    data.write_text("the quick brown fox jumps over the lazy dog. " * 20, encoding="utf-8")
    task = get_task("text").create({"block_size": 16}, data_path=str(data))
    Trainer.start(task, {**TINY, "n_layers": 2, "max_len": 24}, TrainConfig(steps=1), d / "text")
    return d / "text"


def cli(capsys, *argv):
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def test_translate_prints_one_line_per_source_in_order(dates_run, capsys, tmp_path):
    srcs = ["29 November 2026", "Nov 3, 1999", "2001/02/03"]
    rc, out, _ = cli(capsys, "translate", dates_run, *srcs, "--beam", "1")
    assert rc == 0
    lines = out.split("\n")[:-1]
    assert len(lines) == 3
    run = load_run(dates_run)
    v = run.task.vocab
    for s, line in zip(srcs, lines, strict=True):         # each source alone gives the same line
        ids = greedy(run.model, np.array([[v.bos_id]]), run.task.max_target_len,
                     src_ids=run.task.encode_source(s)[None], eos_id=v.eos_id)
        assert line == v.decode(strip_eos(ids, v.eos_id)[0])
    f = tmp_path / "in.txt"
    f.write_text("\n".join(srcs) + "\n", encoding="utf-8")
    rc, out_file, _ = cli(capsys, "translate", dates_run, "--input", f, "--beam", "1")
    assert rc == 0 and out_file == out
    rc, out_beam, _ = cli(capsys, "translate", dates_run, *srcs)          # beam 4 by default
    assert rc == 0 and len(out_beam.split("\n")) == 4


def test_generate_is_reproducible(text_run, capsys):
    args = ("generate", text_run, "--prompt", "the ", "--tokens", 30, "--temperature", 0.9, "--top-k", 5)
    rc, a, _ = cli(capsys, *args, "--seed", 3)
    _, b, _ = cli(capsys, *args, "--seed", 3)
    assert rc == 0 and a == b and a.startswith("the ") and len(a.rstrip("\n")) == 34
    assert set(a.rstrip("\n")) <= set("the quick brown fox jumps over the lazy dog.")
    rc, long_text, _ = cli(capsys, "generate", text_run, "--prompt", "the ", "--tokens", 60)
    assert rc == 0 and len(long_text.rstrip("\n")) == 64    # beyond max_len 24: the window slides


def test_attention_writes_a_png(dates_run, text_run, capsys, tmp_path):
    for run, text in ((dates_run, "1 May 2000"), (text_run, "the dog")):
        fig = tmp_path / f"{run.name}.png"
        rc, out, _ = cli(capsys, "attention", run, text, "--out", fig)
        assert rc == 0 and str(fig) in out
        assert fig.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_attention_dispatches_by_model_kind(dates_run, capsys, tmp_path, monkeypatch):
    from npformer.cli import attention

    calls = []
    monkeypatch.setitem(attention.DRAWERS, "transformer",
                        lambda run, text, out: calls.append((run.config["task"], text, out)) or "drawn")
    rc, out, _ = cli(capsys, "attention", dates_run, "12 May 2000", "--out", tmp_path / "x.png")
    assert rc == 0 and out == "drawn\n" and calls == [("dates", "12 May 2000", str(tmp_path / "x.png"))]


@pytest.mark.parametrize("argv,message", [
    (["translate", "{dates}", "29 Növember 2026"], "outside the vocabulary"),
    (["translate", "{dates}", ""], "empty input"),
    (["translate", "{dates}"], "empty input"),
    (["translate", "{dates}", "--input", "{blank}"], "line 2"),
    (["translate", "{dates}", "--input", "{latin1}"], "not UTF-8"),
    (["translate", "{dates}", "x", "--input", "{blank}"], "not both"),
    (["translate", "{text}", "29 May 2000"], "decoder_lm model"),
    (["translate", "{missing}", "29 May 2000"], "not found"),
    (["translate", "{dates}", "1 May 2000", "--beam", "0"], "--beam"),
    (["generate", "{dates}", "--prompt", "the", "--tokens", "5"], "transformer model"),
    (["generate", "{text}", "--prompt", "", "--tokens", "5"], "empty input"),
    (["generate", "{text}", "--prompt", "THE", "--tokens", "5"], "outside the vocabulary"),
    (["generate", "{text}", "--prompt", "the", "--tokens", "0"], "--tokens"),
    (["generate", "{text}", "--prompt", "the", "--tokens", "5", "--top-k", "0"], "--top-k"),
    (["generate", "{text}", "--prompt", "the", "--tokens", "5", "--temperature", "-1"], "--temperature"),
    (["attention", "{dates}", "29 Növember", "--out", "{png}"], "outside the vocabulary"),
    (["attention", "{dates}", "", "--out", "{png}"], "empty input"),
    (["attention", "{missing}", "x", "--out", "{png}"], "not found"),
    (["attention", "{dates}", "1 May 2000", "--out", "{jpg}"], ".png"),
])
def test_bad_input_is_one_line_and_exit_2(argv, message, dates_run, text_run, capsys, tmp_path):
    (tmp_path / "blank.txt").write_text("1 May 2000\n\n2 May 2000\n", encoding="utf-8")
    (tmp_path / "latin1.txt").write_bytes("1 M\u00e4r 2000\n".encode("latin-1"))
    paths = {"dates": dates_run, "text": text_run, "missing": tmp_path / "nope", "blank": tmp_path / "blank.txt",
             "latin1": tmp_path / "latin1.txt", "png": tmp_path / "a.png", "jpg": tmp_path / "a.jpg"}
    rc, out, err = cli(capsys, *[a.format(**paths) for a in argv])
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "a.png").exists()
