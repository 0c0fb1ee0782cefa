"""The ``similar`` cache key walks the model directory without recursion and within bounds: folders
at most 16 deep, at most 1,000 files and folders, at most KEY_MAX_CONTENT bytes hashed. Past a limit,
a FileFormatError naming the directory, one line and exit 2 on the command line."""
import os

import pytest
from tiny_bert import write_model

from npformer.cli import main, similar
from npformer.settings import FileFormatError


@pytest.fixture
def model(tmp_path):
    return write_model(tmp_path / "model")


def _refused(model, tmp_path, capsys, words):
    with pytest.raises(FileFormatError, match=words) as e:
        similar.model_key(model)
    assert str(model) in str(e.value)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the cat sat\nrain today\n")
    code = main(["similar", "--model", str(model), "--corpus", str(corpus), "a cat"])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert str(model) in err and words in err and "Traceback" not in err, err


def test_the_key_reads_folders_16_deep(model):
    d = model
    for _ in range(16):
        d = d / "d"
    d.mkdir(parents=True)
    (d / "x.json").write_text("{}")
    key = similar.model_key(model)
    (d / "x.json").write_text("{ }")
    assert similar.model_key(model) != key


@pytest.mark.parametrize("depth", [17, 1100])
def test_folders_nested_deeper_are_refused(model, tmp_path, capsys, depth):
    fd = os.open(model, os.O_RDONLY)
    for _ in range(depth):                                              # one level at a time: no path too long
        os.mkdir("d", dir_fd=fd)
        fd, old = os.open("d", os.O_RDONLY, dir_fd=fd), fd
        os.close(old)
    os.close(fd)
    try:
        _refused(model, tmp_path, capsys, "nests folders more than 16 deep")
    finally:                    # deepest first: pytest's own clean-up (shutil.rmtree) recurses once per level
        for level in range(depth, 0, -1):
            os.rmdir(os.path.join(model, *["d"] * level))


def test_more_than_1000_files_are_refused(model, tmp_path, capsys):
    extra = model / "extra"
    extra.mkdir()
    for i in range(1000):
        (extra / f"{i}.txt").touch()
    _refused(model, tmp_path, capsys, "more than 1,000 files and folders")


def test_more_content_than_the_limit_is_refused(model, tmp_path, capsys, monkeypatch):
    small = sum(f.stat().st_size for f in model.rglob("*") if f.is_file() and f.stat().st_size
                <= similar.KEY_HASHED_BYTES)
    monkeypatch.setattr(similar, "KEY_MAX_CONTENT", small)
    similar.model_key(model)                                            # exactly at the limit: read
    (model / "more.json").write_text("{}")
    monkeypatch.setattr(similar, "KEY_MAX_CONTENT", small)
    _refused(model, tmp_path, capsys, f"more than {small:,} bytes")
