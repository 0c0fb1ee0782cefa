"""npformer embed streams: the rows equal ``encode``'s, memory does not grow with the input, and
Ctrl-C or a kill never leaves a partial .npy at the output path."""
import io
import os
import signal
import subprocess
import sys
import time
import tracemalloc

import numpy as np
import pytest

import npformer.cli.embed as embed_cli
from npformer.cli import main
from npformer.pretrained import SentenceEncoder
from oracles import minilm_dir

LINES = ["The cat sits on the mat.", "", "Stock markets fell sharply today.", "héllo wörld", "a",
         "Rain is expected tomorrow in the north.", "   ", "naïve café ☕"]


@pytest.fixture(scope="module")
def enc():
    return SentenceEncoder.load(minilm_dir())


def cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


# -- the library: encode_stream ----------------------------------------------------------------

def test_encode_stream_equals_encode_and_reads_one_chunk_ahead(enc):
    texts = [LINES[i % len(LINES)] + f" {i}" * (i % 3) for i in range(40)]
    taken = []

    def source():                                            # a generator: it records what was read
        for t in texts:
            taken.append(t)
            yield t
    blocks, rows = [], 0
    for block in enc.encode_stream(source(), batch_size=2, chunk_size=16):
        assert block.dtype == np.float32 and block.shape[1] == enc.dim and len(block) <= 16
        rows += len(block)
        assert len(taken) == rows                             # nothing read beyond the block handed out
        blocks.append(block)
    assert [len(b) for b in blocks] == [16, 16, 8]
    np.testing.assert_allclose(np.concatenate(blocks), enc.encode(texts, batch_size=2), atol=1e-6)
    assert list(enc.encode_stream(iter([]))) == []


def test_encode_stream_checks_its_arguments(enc):
    with pytest.raises(ValueError, match="chunk_size"):
        enc.encode_stream(["a"], chunk_size=0)
    with pytest.raises(ValueError, match="batch_size"):
        enc.encode_stream(["a"], batch_size=0)
    with pytest.raises(TypeError, match="iterable of strings"):
        enc.encode_stream("one string")


# -- the command line ---------------------------------------------------------------------------

class Pipe(io.BytesIO):
    """Standard input from a pipe: read once, no seeking."""
    def seekable(self):
        return False


@pytest.mark.parametrize("source", ["file", "stdin_file", "stdin_pipe"])
def test_embed_streams_rows_equal_to_encode(enc, tmp_path, capsys, monkeypatch, source):
    lines = [LINES[i % len(LINES)] + f" {i}" * (i % 4) for i in range(37)]    # chunks of 32 at --batch-size 2
    data = "\ufeff".encode() + "\r\n".join(lines).encode() + b"\n"
    src = tmp_path / "in.txt"
    src.write_bytes(data)
    arg = str(src)
    if source != "file":
        arg = "-"
        raw = Pipe(data) if source == "stdin_pipe" else io.BytesIO(data)
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(raw))
    out = tmp_path / "e.npy"
    code, stdout, _ = cli(capsys, "embed", "-o", out, arg, "--batch-size", 2)
    assert code == 0 and f"wrote 37 x {enc.dim}" in stdout
    got = np.load(out)
    assert got.dtype == np.float32 and got.shape == (37, enc.dim)
    np.testing.assert_allclose(got, enc.encode(lines, batch_size=2), atol=1e-6)
    np.save(tmp_path / "ref.npy", got)                                        # the header np.save writes
    assert (tmp_path / "ref.npy").read_bytes() == out.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["e.npy", "in.txt", "ref.npy"]   # no temporaries


@pytest.mark.parametrize("data,needle", [
    (b"ok\nfine\ncaf\xe9 latin-1\n", "not valid UTF-8 (invalid continuation byte at byte 11)"),
    (b"\xef\xbb\xbf", "is empty"),
    (b"", "is empty"),
], ids=["not_utf8", "bom_only", "empty"])
def test_embed_input_errors_before_loading_the_model(tmp_path, capsys, monkeypatch, data, needle):
    src = tmp_path / "in.txt"
    src.write_bytes(data)
    monkeypatch.setattr(embed_cli, "load_encoder", lambda args: pytest.fail("the model was loaded"))
    code, _, err = cli(capsys, "embed", "-o", tmp_path / "e.npy", src)
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "e.npy").exists()


def test_embed_memory_does_not_grow_with_the_input(enc, tmp_path, capsys, monkeypatch):
    """Peak traced memory for 4N lines is that of N lines: one chunk (64 lines at --batch-size 4) is
    held at a time, never all lines, their token ids or the (lines, dim) output."""
    import npformer.progress  # noqa: F401                    4N lines show progress: its import costs not here
    monkeypatch.setattr(embed_cli, "load_encoder", lambda args: enc)
    n = 64

    def peak(lines: int, trace=True) -> int:
        src = tmp_path / f"in{lines}.txt"
        src.write_text("".join(f"sentence number {i % 8}\n" for i in range(lines)))  # every chunk alike
        if trace:
            tracemalloc.start()
        try:
            assert main(["embed", "-o", str(tmp_path / "e.npy"), str(src), "--batch-size", "4"]) == 0
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
            capsys.readouterr()
    peak(n, trace=False)                                       # warm-up: imports and caches
    small, large = peak(n), peak(4 * n)
    held_output = 3 * n * enc.dim * 4                          # what keeping the output rows would add: 295 kB
    assert large - small < held_output / 3, (small, large)


def _run_embed(tmp_path, out, n_lines=250):
    """A running ``npformer embed`` subprocess, returned once it has written its first rows to the
    temporary file (so it is in the middle of the output)."""
    src = tmp_path / "big.txt"
    src.write_text("".join(f"line {i}: " + "the quick brown fox jumps over the lazy dog " * 8 + "\n"
                           for i in range(n_lines)))                        # under 256 lines: no progress bar
    proc = subprocess.Popen([sys.executable, "-m", "npformer", "embed", "-o", str(out), str(src), "--batch-size", "2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        tmps = list(tmp_path.glob(f".{out.name}.*.tmp"))
        if tmps and tmps[0].stat().st_size > 1000:          # past the header: rows are being written
            return proc
        time.sleep(0.01)
    proc.kill()
    pytest.fail(f"embed never got going: {proc.communicate()}")


@pytest.mark.skipif(os.name != "posix", reason="POSIX signals")
@pytest.mark.parametrize("sig,previous", [(signal.SIGINT, False), (signal.SIGINT, True), (signal.SIGKILL, True)],
                         ids=["ctrl_c", "ctrl_c_over_old_file", "kill_over_old_file"])
def test_interrupted_embed_leaves_no_partial_npy(enc, tmp_path, sig, previous):
    out = tmp_path / "e.npy"
    if previous:
        np.save(out, np.ones((2, 3), np.float32))
    before = out.read_bytes() if previous else None
    proc = _run_embed(tmp_path, out)
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=120)
    if sig == signal.SIGINT:
        assert proc.returncode == 130
        assert stderr.strip() == f"npformer embed: interrupted; {out} not written"
        assert not list(tmp_path.glob(".*.tmp"))             # the temporary file is removed
    else:
        assert proc.returncode == -signal.SIGKILL            # (its temporary file stays, hidden, unread)
    assert "wrote" not in stdout
    if previous:
        assert out.read_bytes() == before                    # the old file, untouched
    else:
        assert not out.exists()
