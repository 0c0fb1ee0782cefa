"""Any target (issue 25): the prediction and 4 alternatives at each output position, and --target POS=TOKEN
(the --serve form's target field): its parsing, its one-line errors (exit 2 on the command line, 400 from
the server), and the chosen target first in the page with its relevance and knock-outs."""
import json
import re

import numpy as np
import pytest
from explore_runs import INPUTS, explore_runs, one_line_error  # noqa: F401 (a fixture)
from serve_client import post, serving

from npformer.cli import main
from npformer.explore import targets as tg
from npformer.explore.payload import decode_array, open_explorer


def cli(capsys, *argv):
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def page_payload(path) -> dict:
    text = open(path, encoding="utf-8").read()
    return json.loads(re.search(r'<script type="application/json" id="payload">(.*?)</script>', text, re.S).group(1))


@pytest.mark.parametrize("spec,want", [("5=1", ("5", "1")), ("pick=6", ("pick", "6")), (" Place =12", ("place", "12")),
                                       ("cls=3", ("cls", "3")), ("0==", ("0", "=")), ("2= ", ("2", " "))])
def test_split_target(spec, want):
    assert tg.split_target(spec) == want


@pytest.mark.parametrize("spec", ["5", "=1", "5=", "pik=3", "-1=a", "1.5=a", "x" * 300 + "=1", None, 5])
def test_split_target_refuses(spec):
    with pytest.raises(tg.TargetError, match="^target must be POS=TOKEN"):
        tg.split_target(spec)


def test_resolve_reads_text_before_ids_and_checks_ranges():
    chars = {"1": 7, "a": 3, "<eos>": 2}
    assert tg.resolve("5=1", 11, chars, 40, "token") == (5, 7)             # the character '1', not id 1
    assert tg.resolve("5=12", 11, chars, 40, "token") == (5, 12)           # no such text: an id
    assert tg.resolve("0=<eos>", 11, chars, 40, "token") == (0, 2)
    assert tg.resolve("place=6", {"pick": 0, "place": 1}, {}, 16, "cell") == (1, 6)
    for spec, positions, fragment in [("11=a", 11, "position 11 is past the output's 11 positions (0..10)"),
                                      ("5=zz", 11, "TOKEN must be the token's text or an id in 0..39"),
                                      ("5=40", 11, "in 0..39"),
                                      ("pick=16", {"pick": 0, "place": 1}, "TOKEN must be a cell number in 0..15"),
                                      ("cls=1", {"pick": 0, "place": 1}, "POS must be pick or place"),
                                      ("3=1", {"cls": 0}, "POS must be cls"),
                                      ("pick=1", 11, "POS must be a 0-based output position")]:
        n_ids = 16 if isinstance(positions, dict) else 40
        with pytest.raises(tg.TargetError, match=re.escape(fragment)):
            tg.resolve(spec, positions, {} if isinstance(positions, dict) else chars, n_ids,
                       "cell" if isinstance(positions, dict) else "token")


def test_choose_orders_prediction_alternatives_and_the_chosen_one():
    logits = np.array([[0.0, 3.0, 1.0, 2.0, -1.0, 5.0, 4.0],
                       [9.0, 0.0, 0.0, 1.0, 2.0, 3.0, 4.0]])               # (P, V)
    got = tg.choose(logits, [1, 0])                                          # position 0 predicted 1, not the argmax
    assert [(t.slot, t.id, t.rank) for t in got] == [(0, 1, 0), (0, 5, 1), (0, 6, 2), (0, 3, 3), (0, 2, 4),
                                                     (1, 0, 0), (1, 6, 1), (1, 5, 2), (1, 4, 3), (1, 3, 4)]
    got = tg.choose(logits, [5, 0], chosen=(1, 2))
    assert (got[0].slot, got[0].id, got[0].rank, got[0].chosen) == (1, 2, 5, True) and len(got) == 11
    got = tg.choose(logits, [5, 0], chosen=(0, 6))                          # an alternative, moved first
    assert (got[0].id, got[0].rank, got[0].chosen) == (6, 1, True) and len(got) == 10
    got = tg.choose(logits, [5, 0], extra=((0, 4),), slots=[0])            # the extra one after the top 5
    assert [(t.id, t.rank) for t in got] == [(5, 0), (6, 1), (1, 2), (3, 3), (2, 4), (4, 6)]
    assert tg.suffix(got[1]) == " (alternative 1)" and tg.suffix(tg.Target(0, 1, 9, True)) == " (chosen, rank 9)"


@pytest.mark.parametrize("kind,target,want_name,want_query", [
    ("dates", "3=1", "output 3: 1 (chosen", 3),
    ("tabletop", "pick=6", "pick: cell 6 (chosen", 0),
    ("digits", "cls=4", "class 4 (chosen", 0),
    ("text", "2=e", "after position 2: e (chosen", 2),
])
def test_the_chosen_target_comes_first_with_relevance_and_knockouts(explore_runs, kind, target, want_name,  # noqa: F811
                                                                    want_query):
    ex = open_explorer(explore_runs[kind])
    inp = ex.payload([dict(INPUTS[kind][0], target=target)])["inputs"][0]
    first = inp["targets"][0]
    assert first["name"].startswith(want_name) and first["chosen"] and first["query"] == want_query
    assert sum(t["chosen"] for t in inp["targets"]) == 1
    assert all(first["name"] in g["relevance"] for g in inp["groups"])
    for kg in inp["knockout"]["groups"].values():
        assert decode_array(kg["effect"]).shape[-1] == len(inp["targets"]) == len(kg["spearman"])
    default = ex.payload(INPUTS[kind])["inputs"][0]
    assert default["targets"][0]["rank"] == 0 and not any(t["chosen"] for t in default["targets"])


@pytest.mark.parametrize("argv,fragments", [
    (["--target", "pick"], ["--target must be POS=TOKEN", "pick, place or cls"]),
    (["--target", "7=3"], ["--target '7=3'", "POS must be pick or place"]),
    (["--target", "place=99"], ["--target 'place=99'", "cell number in 0..15"]),
])
def test_target_errors_are_one_line_exit_2(explore_runs, capsys, tmp_path, argv, fragments):  # noqa: F811
    rc, out, err = cli(capsys, "explore", explore_runs["tabletop"], *argv, "--out", tmp_path / "t.html")
    assert rc == 2 and out == ""
    one_line_error(err, *fragments)
    assert not (tmp_path / "t.html").exists()


def test_target_on_the_command_line(explore_runs, capsys, tmp_path):  # noqa: F811
    rc, out, _ = cli(capsys, "explore", explore_runs["dates"], "29 November 2026", "--target", "40=1",
                     "--out", tmp_path / "d.html")
    assert rc == 2
    rc, out, _ = cli(capsys, "explore", explore_runs["tabletop"], "--seed", 3, "--target", "place=5",
                     "--out", tmp_path / "t.html")
    assert rc == 0 and out.strip() == str(tmp_path / "t.html")
    first = page_payload(tmp_path / "t.html")["inputs"][0]["targets"][0]
    assert first["position"] == "place" and first["id"] == 5 and first["chosen"]


def test_minilm_takes_no_target(capsys):
    rc, _, err = cli(capsys, "explore", "minilm", "a sentence", "--target", "0=a")
    assert rc == 2
    one_line_error(err, "--target is for trained runs")


def test_serve_takes_a_target_field(explore_runs):  # noqa: F811
    with serving(explore_runs["dates"]) as srv:
        status, p = post(srv, {"inputs": [{"text": "29 November 2026", "target": "2=9"}]})
        assert status == 200 and p["inputs"][0]["targets"][0]["name"].startswith("output 2: 9 (chosen")
        status, p = post(srv, {"inputs": [{"text": "29 November 2026", "target": "99=9"}]})
        assert status == 400 and p["error"].startswith("target '99=9': position 99 is past")
        status, p = post(srv, {"inputs": [{"text": "29 November 2026", "target": 3}]})
        assert status == 400 and "target must be a string" in p["error"]
