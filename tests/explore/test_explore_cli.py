"""``npformer explore`` from the command line: one HTML file per call whose payload is the input's, the
default paths, the one-line errors (exit 2), ``make demo``'s explorer step, ``show`` for Jupyter and the
MiniLM page's size at 128 word pieces."""
import json
import re
import socket
import subprocess
import sys

import numpy as np
import pytest
from explore_runs import explore_runs, one_line_error  # noqa: F401 (a fixture)

from npformer.cli import main
from npformer.explore.payload import decode_array
from oracles import minilm_dir


def cli(capsys, *argv):
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def page_payload(path) -> dict:
    """The payload inlined in a written page (<script type="application/json" id="payload">)."""
    text = open(path, encoding="utf-8").read()
    m = re.search(r'<script type="application/json" id="payload">(.*?)</script>', text, re.S)
    assert m, "no payload element in the page"
    return json.loads(m.group(1))


@pytest.mark.parametrize("kind,argv,label", [
    ("dates", ["29 November 2026", "3 March 1931"], "29 November 2026"),
    ("text", ["the lazy fox"], "the lazy fox"),
    ("digits", ["17"], "test image 17"),
    ("tabletop", ["--seed", "3"], "scene 3: "),
])
def test_writes_one_page_and_prints_its_path(explore_runs, capsys, tmp_path, kind, argv, label):  # noqa: F811
    out = tmp_path / f"{kind}.html"
    rc, stdout, _ = cli(capsys, "explore", explore_runs[kind], *argv, "--out", out)
    assert rc == 0 and stdout.strip() == str(out)
    p = page_payload(out)
    assert p["version"] == 1 and p["model"]["kind"] == kind
    assert p["inputs"][0]["label"].startswith(label)
    assert p["training"]["steps"] == [0, 2, 4]                          # the probe, from training
    if kind == "dates":
        assert [i["label"] for i in p["inputs"]] == argv
        assert [g["name"] for g in p["inputs"][0]["groups"]] == ["encoder self", "decoder self", "decoder cross"]
    if kind in ("digits", "tabletop"):
        img = p["inputs"][0]["image"]
        assert decode_array(img["rgb"]).dtype == np.uint8 and img["grid"] == [4, 4]
    text = out.read_text(encoding="utf-8")
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", text)   # nothing loaded from elsewhere


def test_default_path_is_in_the_run_directory(explore_runs, capsys):  # noqa: F811
    rc, stdout, _ = cli(capsys, "explore", explore_runs["digits"], "5")
    assert rc == 0 and stdout.strip() == str(explore_runs["digits"] / "explore.html")
    assert page_payload(explore_runs["digits"] / "explore.html")["inputs"][0]["label"] == "test image 5"


def test_tabletop_instruction_and_targets(explore_runs, capsys, tmp_path):  # noqa: F811
    from npformer.data.tabletop_policy import scene_for_seed
    scene, _ = scene_for_seed(3)
    colour, container = next(iter(scene.blocks)), next(iter(scene.containers))
    text = f"put the {colour} block in the {container}"
    rc, _, _ = cli(capsys, "explore", explore_runs["tabletop"], "--seed", 3, "--instruction", text,
                   "--out", tmp_path / "t.html")
    assert rc == 0
    inp = page_payload(tmp_path / "t.html")["inputs"][0]
    assert inp["label"] == f"scene 3: {text}"
    predicted = [t for t in inp["targets"] if t["rank"] == 0]          # the others: alternatives (issue 25)
    assert [t["name"] for t in predicted] == ["pick", "place"] and [t["query"] for t in predicted] == [0, 1]
    g = inp["groups"][0]
    assert g["query_tokens"][:2] == ["PICK", "PLACE"] and g["query_tokens"][2:2 + len(text.split())] == text.split()
    assert g["token_kinds"]["key"].count("patch") == 16
    assert inp["image"]["patch_token_offset"] == g["key_tokens"].index("p(0,0)")
    assert inp["meta"]["true_pick"] == scene.blocks[colour]


@pytest.mark.parametrize("argv,fragments", [
    (["explore", "{tmp}/no_such_run", "x"], ["run directory not found"]),
    (["explore", "{dates}", "29 Nov\u00e9mber \u2603"], ["characters outside the vocabulary"]),
    (["explore", "{digits}", "450"], ["test-image index must be in 0..449, got 450"]),
    (["explore", "{digits}", "seven"], ["test-image index 0..449"]),
    (["explore", "{tabletop}", "--seed", "3", "--instruction", "put the zebra in the box"], ["unknown word 'zebra'"]),
    (["explore", "{tabletop}", "hello"], ["--seed S and --instruction TEXT"]),
    (["explore", "{dates}", "x", "--seed", "2"], ["--seed and --instruction are for a tabletop run"]),
    (["explore", "{dates}", "x", "--out", "{tmp}/page.png"], ["--out must name an .html file"]),
    (["explore", "{dates}", "x", "--out", "{tmp}/missing/page.html"], ["directory does not exist"]),
    (["explore", "{dates}", "a", "b", "c", "d", "e"], ["at most 4 inputs"]),
    (["explore", "{dates}", "x", "--serve", "--out", "{tmp}/p.html"], ["takes no --out"]),
])
def test_bad_input_is_one_line_and_exit_2(explore_runs, capsys, tmp_path, argv, fragments):  # noqa: F811
    argv = [a.format(tmp=tmp_path, **explore_runs) for a in argv]
    rc, _, err = cli(capsys, *argv)
    assert rc == 2
    one_line_error(err, "npformer explore: error:", *fragments)


def test_a_port_in_use_is_one_line_and_exit_2(explore_runs, capsys):  # noqa: F811
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        rc, _, err = cli(capsys, "explore", explore_runs["digits"], "--serve", "--port", port)
    assert rc == 2
    one_line_error(err, f"port {port} is in use on 127.0.0.1")


def test_demo_ends_with_the_explorer_for_dates_and_tabletop(explore_runs, capsys, tmp_path, monkeypatch):  # noqa: F811
    from npformer.cli import demo
    assert demo.STEPS[-1][0] == "explore"
    runs = tmp_path / "runs"
    runs.mkdir()
    for name in ("dates", "tabletop"):
        (runs / name).symlink_to(explore_runs[name], target_is_directory=True)
    monkeypatch.setattr(demo, "STEPS", demo.STEPS[-1:])
    rc, out, _ = cli(capsys, "demo", "--runs", runs, "--no-progress")
    assert rc == 0
    paths = [line.split(": ", 1)[1].split()[0] for line in out.splitlines() if line.startswith("open in a browser")]
    assert paths == [str((runs / n / "explore.html").resolve()) for n in ("dates", "tabletop")]
    assert page_payload(paths[1])["inputs"][0]["label"] == f"scene {demo.yellow_bowl_seed()}: {demo.DEMO_INSTRUCTION}"


def test_show_gives_an_iframe_of_the_same_page_without_importing_ipython(explore_runs, tmp_path):  # noqa: F811
    from npformer.explore import show
    view = show(explore_runs["digits"], 17)
    frame = view._repr_html_()
    assert frame.startswith("<iframe srcdoc=\"") and "&lt;script" in frame and "<script" not in frame
    view.save(tmp_path / "v.html")
    assert page_payload(tmp_path / "v.html")["inputs"][0]["label"] == "test image 17"
    code = "import sys, npformer.explore; print('IPython' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "False"


def _sentence_of(tokenizer, pieces: int) -> str:
    words = ("the quick brown fox jumps over the lazy dog while seven wizards quietly hex a jovial bard "
             "near the old river bank").split()
    out = []
    for w in words * 20:
        if len(tokenizer.encode([" ".join(out + [w])])[0]) > pieces:
            break
        out.append(w)
    return " ".join(out)


def test_minilm_page_at_128_word_pieces_is_under_5_mb(capsys, tmp_path):
    """q, k, v float32 (zlib-compressed byte planes), no 8-bit weights (the page computes them), rollout 8-bit,
    relevance float16: the whole page for one 128-piece sentence stays under 5,000,000 bytes."""
    minilm_dir()
    from npformer.pretrained import SentenceEncoder
    text = _sentence_of(SentenceEncoder.load().tokenizer, 128)
    out = tmp_path / "minilm.html"
    rc, stdout, _ = cli(capsys, "explore", "minilm", text, "--out", out)
    assert rc == 0 and stdout.strip() == str(out)
    g = page_payload(out)["inputs"][0]["groups"][0]
    assert len(g["query_tokens"]) == 128 and g["weights"] is None and g["q"]["codec"] == "zlib-shuffle4"
    size = out.stat().st_size
    assert size < 5_000_000, size
    rc, _, err = cli(capsys, "explore", "minilm", "one", "two", "three")
    assert rc == 2
    one_line_error(err, "at most 2 inputs")


@pytest.mark.parametrize("kind", ["dates", "text", "digits", "tabletop"])
def test_without_input_a_default_one_is_shown(explore_runs, capsys, tmp_path, kind):  # noqa: F811
    rc, _, _ = cli(capsys, "explore", explore_runs[kind], "--out", tmp_path / "d.html")
    assert rc == 0 and len(page_payload(tmp_path / "d.html")["inputs"]) == 1
