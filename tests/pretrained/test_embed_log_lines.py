"""npformer embed and ``SentenceEncoder.encode(progress=True)`` in a log (stderr not a terminal): a
plain line per tenth of the sentences, no carriage returns. On the tiny generated model (tiny_bert.py)."""
import re

import pytest
from tiny_bert import write_model

from npformer.cli import main
from npformer.pretrained import SentenceEncoder

N = 300                                          # over embed's PROGRESS_FROM (256): it shows progress


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return write_model(tmp_path_factory.mktemp("tiny") / "model")


def counts(err: str) -> list[int]:
    return [int(m.group(1)) for m in re.finditer(rf"^embedding: (\d+)/{N} sentences \(\d+%\) in ", err, flags=re.M)]


def test_embed_writes_a_line_per_tenth_it_passes(model_dir, tmp_path, capsys):
    src = tmp_path / "in.txt"
    src.write_text("".join(f"the cat sat on the mat {i % 7}\n" for i in range(N)))
    code = main(["embed", "-o", str(tmp_path / "e.npy"), str(src), "--model", str(model_dir), "--batch-size", "4"])
    out, err = capsys.readouterr()
    assert code == 0 and "\r" not in out + err and len(err.splitlines()) == 5, err
    assert counts(err) == [64, 128, 192, 256, 300]                      # 64-line chunks (16 batches of 4)


def test_encode_with_progress_writes_at_most_ten_lines(model_dir, capsys):
    emb = SentenceEncoder.load(model_dir).encode(["the dog sat"] * N, batch_size=8, progress=True)
    err = capsys.readouterr().err
    assert emb.shape[0] == N and "\r" not in err
    steps = counts(err)
    assert 1 <= len(steps) <= 10 and steps[-1] == N and steps == sorted(steps), err
