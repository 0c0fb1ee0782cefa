"""Files someone else wrote: safetensors ranges that must tile the data (a load's memory bounded by
the file), one module that reads safetensors, errors that never quote a file's bytes (nor more than
64 characters of a value), and links that stay inside their model directory."""
import ast
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from tiny_bert import header_of, with_header, write_model

import npformer
from hf_dirs import tokenizer_json
from npformer.cli import main
from npformer.pretrained import BertConfig, SentenceEncoder
from npformer.pretrained.gpt2 import ByteBPETokenizer
from npformer.settings import FileFormatError
from npformer.train.probe import read_probe

SECRET = "hunter2-the-one-line-secret"


def _cli(capsys, *argv):
    code = main(list(argv))
    _, err = capsys.readouterr()
    return code, err


def _embed(capsys, model, tmp_path):
    (tmp_path / "in.txt").write_text("the cat sat\n")
    return _cli(capsys, "embed", "--model", str(model), "--output", str(tmp_path / "o.npy"), str(tmp_path / "in.txt"))


def _refused(capsys, model, tmp_path, *words):
    """SentenceEncoder.load and `npformer embed` both refuse ``model`` with one line holding ``words``."""
    with pytest.raises(FileFormatError) as e:
        SentenceEncoder.load(model)
    code, err = _embed(capsys, model, tmp_path)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    for w in words:
        assert w in str(e.value) and w in err, (w, str(e.value), err)
    return str(e.value) + err


# -- safetensors ranges --------------------------------------------------------------------------------

@pytest.mark.parametrize("case,words", [("shared", "overlap"), ("trailing", "no tensor's data_offsets cover")])
def test_ranges_must_tile_the_data_section(tmp_path, capsys, case, words):
    model = write_model(tmp_path / "model")
    f = model / "model.safetensors"
    data = f.read_bytes()
    if case == "shared":                                   # every tensor at the start: the same bytes for all
        header = header_of(data)
        for e in header.values():
            if isinstance(e, dict) and "data_offsets" in e:
                e["data_offsets"] = [0, e["data_offsets"][1] - e["data_offsets"][0]]
        f.write_bytes(with_header(data, header))
    else:
        f.write_bytes(data + b"\0" * 8)
    _refused(capsys, model, tmp_path, str(f), words)


def test_a_load_takes_memory_bounded_by_the_file(tmp_path):
    """100 layers whose tensors all point at one 1 MB range: before, each was read on its own (and a
    model built), some 600 MB from a 1 MB file. Peak memory of the loading child <= 3 x file + 200 MB."""
    cfg = {"architectures": ["BertModel"], "model_type": "bert", "vocab_size": 40, "hidden_size": 256,
           "num_hidden_layers": 100, "num_attention_heads": 4, "intermediate_size": 1024,
           "max_position_embeddings": 16, "type_vocab_size": 2, "layer_norm_eps": 1e-12, "hidden_act": "gelu"}
    shapes = list(BertConfig.from_dict(cfg).checkpoint_shapes())
    size = max(int(np.prod(s)) * 4 for _, s in shapes)
    header = {name: {"dtype": "F32", "shape": list(s), "data_offsets": [0, int(np.prod(s)) * 4]} for name, s in shapes}
    raw = json.dumps(header).encode()
    d = tmp_path / "m"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    (d / "model.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(size))
    file_size = (d / "model.safetensors").stat().st_size
    # the child's own peak: ru_maxrss survives exec, so a child forked from a large pytest process would
    # report the parent's size; /proc/self/status's VmHWM belongs to the address space exec made
    child = ("import resource, sys\nfrom npformer.pretrained import load_bert\nfrom npformer.settings import "
             "FileFormatError\ntry:\n    load_bert(sys.argv[1])\n    print('loaded')\nexcept FileFormatError as e:\n"
             "    print('refused', e)\ntry:\n    hwm = [x for x in open('/proc/self/status') if x[:5] == 'VmHWM']\n"
             "    print(hwm[0].split()[1])\nexcept OSError:\n"
             "    print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)\n")
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "PYTHONPATH": str(Path(npformer.__file__).parents[1])}
    out = subprocess.run([sys.executable, "-c", child, str(d)], capture_output=True, text=True, env=env,
                         timeout=120, check=True).stdout.splitlines()
    peak = int(out[-1]) * 1024                                        # Linux: KiB
    assert peak <= 3 * file_size + 200 * 2 ** 20, (peak, out)
    assert out[0].startswith("refused") and "overlap" in out[0], out


def test_only_tensorfile_reads_safetensors():
    """No module but npformer/tensorfile.py imports safetensors, reaches into its private names, or
    defines a reader of its own."""
    root = Path(npformer.__file__).parent
    bad = []
    for path in sorted(root.rglob("*.py")):
        if path.name == "tensorfile.py" and path.parent == root:
            continue
        source = path.read_text(encoding="utf-8")
        if not any(w in source for w in ("safetensors", "tensorfile", "read_header", "read_tensors")):
            continue                                                  # none of the names below: nothing to parse
        for node in ast.walk(ast.parse(source)):
            where = f"{path.relative_to(root)}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.Import):
                bad += [f"{where} imports {a.name}" for a in node.names if a.name.split(".")[0] == "safetensors"]
            elif isinstance(node, ast.ImportFrom):
                mod = node.module or ""
                if mod.split(".")[0] == "safetensors":
                    bad.append(f"{where} imports {mod}")
                if mod.endswith("tensorfile"):
                    bad += [f"{where} imports {a.name}" for a in node.names if a.name.startswith("_")]
            elif isinstance(node, ast.Attribute) and node.attr.startswith("_") and \
                    isinstance(node.value, ast.Name) and node.value.id == "tensorfile":
                bad.append(f"{where} uses tensorfile.{node.attr}")
            elif isinstance(node, ast.FunctionDef) and node.name in ("read_header", "read_tensors",
                                                                     "safetensors_bytes"):
                bad.append(f"{where} defines {node.name}")
            elif isinstance(node, ast.Constant) and str(node.value).startswith("safetensors."):
                bad.append(f"{where} names {node.value}")
    assert not bad, "\n".join(bad)


# -- errors that never quote a file's bytes ---------------------------------------------------------

def test_a_merges_line_is_never_quoted(tmp_path, capsys):
    d = tmp_path / "gpt2"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"model_type": "gpt2", "vocab_size": 3, "n_embd": 8, "n_layer": 1,
                                               "n_head": 2, "n_positions": 8}))
    (d / "vocab.json").write_text(json.dumps({"a": 0, "b": 1, "ab": 2}))
    (d / "merges.txt").write_text(SECRET + "\n")
    with pytest.raises(FileFormatError) as e:
        ByteBPETokenizer(d)
    code, err = _cli(capsys, "generate", str(d), "--prompt", "a")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    for text in (str(e.value), err):
        assert "merges.txt line 1" in text and SECRET not in text and SECRET[:8] not in text, text


def test_a_safetensors_file_of_text_is_not_shown_as_a_number(tmp_path, capsys):
    model = write_model(tmp_path / "model")
    passwd = b"root:x:0:0:root:/root:/bin/bash\n"
    (model / "model.safetensors").write_bytes(passwd * 4)
    n = struct.unpack("<Q", passwd[:8])[0]
    text = _refused(capsys, model, tmp_path, str(model / "model.safetensors"))
    assert str(n) not in text and f"{n:,}" not in text and "bin/bash" not in text, text


def test_a_long_value_is_quoted_to_64_characters(tmp_path, capsys):
    model = write_model(tmp_path / "model")
    cfg = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**cfg, "hidden_act": SECRET * 20}))
    text = _refused(capsys, model, tmp_path, "hidden_act")
    assert SECRET * 3 not in text, text


# -- links that stay home ----------------------------------------------------------------------------

@pytest.mark.parametrize("what", ["file", "folder"])
def test_a_link_leading_outside_is_refused(tmp_path, capsys, what):
    model = write_model(tmp_path / "model")
    if what == "file":
        outside = tmp_path / "secret.txt"
        outside.write_text(SECRET + "\n")
        (model / "tokenizer.json").unlink()
        (model / "tokenizer.json").symlink_to(outside)
        link = model / "tokenizer.json"
    else:
        (model / "1_Pooling").rename(tmp_path / "pool")
        (model / "1_Pooling").symlink_to(tmp_path / "pool", target_is_directory=True)
        link = model / "1_Pooling"
    text = _refused(capsys, model, tmp_path, str(link), "cp -rL")
    assert SECRET not in text


def test_the_hugging_face_cache_layout_is_read(tmp_path, capsys):
    """models--ORG--NAME/snapshots/REV/ links into the same repository's blobs/: read as usual; a link
    from the snapshot to another repository's blobs is refused."""
    made = write_model(tmp_path / "made")
    repo = tmp_path / "hub" / "models--org--tiny"
    snap, blobs = repo / "snapshots" / "rev1", repo / "blobs"
    blobs.mkdir(parents=True)
    for f in sorted(made.rglob("*")):
        if f.is_file():
            rel = f.relative_to(made)
            blob = blobs / f"blob{len(list(blobs.iterdir()))}"
            f.rename(blob)
            (snap / rel).parent.mkdir(parents=True, exist_ok=True)
            (snap / rel).symlink_to(os.path.relpath(blob, (snap / rel).parent))
    assert SentenceEncoder.load(snap).encode(["the cat sat"]).shape[0] == 1
    other = tmp_path / "hub" / "models--org--other" / "blobs"
    other.mkdir(parents=True)
    (other / "tok").write_text(tokenizer_json())
    (snap / "tokenizer.json").unlink()
    (snap / "tokenizer.json").symlink_to(other / "tok")
    _refused(capsys, snap, tmp_path, str(snap / "tokenizer.json"), "cp -rL")


# -- a run directory's probe file -------------------------------------------------------------------

def test_a_probe_file_with_a_missing_entry_is_one_line(tmp_path):
    from npformer.tensorfile import safetensors_bytes
    run = tmp_path / "run"
    run.mkdir()
    tensors = {"weights": np.zeros((1, 1, 1, 2, 2), np.uint8), "steps": np.zeros(1, np.int64),
               "input.1": np.zeros((1, 2), np.int64)}                  # input.0 missing
    (run / "probe_attention.safetensors").write_bytes(
        safetensors_bytes(tensors, {"format": "npformer-probe", "version": "1", "group": "self"}))
    with pytest.raises(FileFormatError) as e:
        read_probe(run)
    assert str(run / "probe_attention.safetensors") in str(e.value) and "input.0" in str(e.value)
