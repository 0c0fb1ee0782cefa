"""The explorer's episode view of a gripper run (``npformer explore RUN --seed S [--perturb]``): the episode
in the payload is the one ``npformer.load_policy`` plays in ``GripperEnv``; each step's stored 8-bit weights
are the model's own attention (``ActionLM.attention_weights`` of a full forward) to 0.5/255; a 50-step
page stays under 5 MB and is written in under 5 s; in chromium the timeline follows the keyboard (arrows,
Home/End), the frame's overlay carries the model's weights at that step, the perturbation is marked, and
the page asks the network for nothing; ``--serve`` answers a new instruction and seed with a new episode;
bad input is one line and exit 2."""
import re
import time

import numpy as np
import pytest
from explore_runs import gripper_run, one_line_error  # noqa: F401 (a fixture)
from serve_client import serving

import npformer
from npformer.cli import main
from npformer.data.tabletop import model_words
from npformer.explore.payload import decode_array, open_explorer
from npformer.explore.render import render_html
from npformer.sim.env import GripperEnv

SEED = 3                                 # with the tiny run: 50 steps (truncated), the red block moves after step 3
U8 = 0.5 / 255 + 1e-6                    # an 8-bit weight's rounding, and float32's


@pytest.fixture(scope="module")
def written(gripper_run, tmp_path_factory):  # noqa: F811
    path = tmp_path_factory.mktemp("episode") / "episode.html"
    t0 = time.perf_counter()
    payload = open_explorer(gripper_run).payload([{"seed": SEED, "perturb": 1}])
    path.write_text(render_html(payload), encoding="utf-8")
    return path, payload, time.perf_counter() - t0


def replay(run, seed: int, perturb: bool):
    """The episode played again outside the explorer: (policy, frames (S, 48, 48, 3), tokens (S, 3), world)."""
    from npformer.data.gripper_policy import eval_episode_seed
    from npformer.train.checkpoint import load_run, run_seed

    policy = npformer.load_policy(run)
    env = GripperEnv()                      # evaluation episode ``seed``, as npformer act --seed plays it
    obs, _ = env.reset(seed=eval_episode_seed(run_seed(load_run(run, task="gripper")), seed),
                       options={"split": "test", "perturb": perturb})
    policy.reset()
    frames, tokens = [], []
    while True:
        frames.append(obs["image"])
        action = policy.act(obs)
        tokens.append(policy.last["tokens"][0])
        obs, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            break
    return policy, np.stack(frames), np.stack(tokens), env.world


def model_rows(policy, instruction: str, frames, tokens) -> np.ndarray:
    """The model's attention from its three action tokens at every step, (S, L, H, 3, T): one full forward,
    teacher-forced on the chosen tokens, read with ActionLM.attention_weights."""
    m = policy.model
    n = len(frames)
    words = np.repeat(model_words(policy.reader, m, [instruction]), n, axis=0)
    actions_in = np.concatenate([np.full((n, 1), m.config.bos_id), tokens[:, :-1]], axis=1)
    _, cache = m.forward(words, frames.astype(np.float32) / 255, actions_in)
    w = np.stack([layer["self"] for layer in m.attention_weights(cache)], axis=1)   # (S, L, H, T, T)
    return w[:, :, :, -3:].astype(np.float64)


def test_the_payload_is_the_episode_and_each_step_holds_the_models_attention(written, gripper_run):  # noqa: F811
    _, payload, _ = written
    ep = payload["episode"]
    policy, frames, tokens, world = replay(gripper_run, SEED, True)
    assert ep["steps"] == len(tokens) == len(payload["inputs"]) == 50
    assert ep["tokens"] == tokens.tolist()
    assert ep["outcome"] == "never_grasped" and ep["truncated"]
    assert [(e["step"], e["kind"], e["colour"]) for e in ep["events"]] == [tuple(e) for e in world.events]
    assert any(e["kind"] == "moved" for e in ep["events"])
    assert np.allclose(ep["path"][-1][:2], world.gripper, atol=1e-5)
    rows = model_rows(policy, world.instruction, frames, tokens)                       # (S, L, H, 3, T)
    dists = decode_array(ep["dists"])                                                  # (S, 2, B)
    for i, inp in enumerate(payload["inputs"]):
        g = inp["groups"][0]
        assert g["query_tokens"][0] == "act:BOS" and g["q"] is None
        stored = decode_array(g["weights"])                                            # (L, H, 3, T)
        assert np.abs(stored - rows[i]).max() <= U8, i
        assert np.array_equal(decode_array(inp["image"]["rgb"]), frames[i])
        for j in range(3):                                   # greedy: the chosen token is the top alternative
            top = ep["top"][i][j]
            assert top[0][0] == tokens[i, j] and len(top) == (5 if j < 2 else 3)
            assert all(a[1] >= b[1] for a, b in zip(top, top[1:], strict=False))
        assert np.argmax(dists[i, 0]) == tokens[i, 0] and np.argmax(dists[i, 1]) == tokens[i, 1]
        assert inp["knockout"]["groups"]["self"]["queries"] == [0, 1, 2]


def test_a_50_step_page_is_under_5_mb_and_written_in_under_5_s(written):
    path, payload, seconds = written
    size = path.stat().st_size
    print(f"50-step episode page: {size / 1e6:.2f} MB, written in {seconds:.2f} s")
    assert payload["episode"]["steps"] == 50
    assert size < 5e6, size
    assert seconds < 5.0, seconds


def test_the_timeline_follows_the_keyboard_and_the_overlay_is_the_models_attention(written, gripper_run,  # noqa: F811
                                                                                   opened):
    path, payload, _ = written
    ep = payload["episode"]
    o = opened(path.as_uri())
    page = o.page
    state = "window.npformerPage.S"
    assert page.evaluate(f"{state}.view") == "episode"                   # a gripper page opens on its episode
    assert "no block was ever grasped" in page.inner_text("#episode-outcome")
    page.focus("#episode-timeline")
    # the perturbed episode's target moves once, after step k (1 to 3, before a grasp this policy never makes):
    # step k + 1's frame is the first to show it, and that step says so
    moved = [e for e in ep["events"] if e["kind"] == "moved"]
    assert len(moved) == 1 and 1 <= moved[0]["step"] <= 3, ep["events"]
    k, colour = moved[0]["step"], moved[0]["colour"]
    for key in ["ArrowRight"] * k + ["ArrowDown"]:
        page.keyboard.press(key)
    assert page.evaluate(f"[{state}.input, {state}.episodeSlot]") == [k, 1]
    said = page.inner_text("#episode-said")
    assert said.startswith(f"step {k + 1} of 50") and f"after step {k} the {colour} block moved" in said, said
    page.keyboard.press("End")
    assert page.evaluate(f"{state}.input") == 49 and page.inner_text("#episode-said").startswith("step 50 of 50")
    page.keyboard.press("Home")
    page.keyboard.press("ArrowLeft")                                       # stays at the first step
    assert page.evaluate(f"{state}.input") == 0
    for _ in range(7):
        page.keyboard.press("ArrowRight")
    page.keyboard.press("ArrowDown")
    page.keyboard.press("ArrowDown")
    page.keyboard.press("ArrowDown")                                       # stays at the last token
    numbers = page.evaluate(f"{state}.numbers")
    assert (numbers["step"], numbers["slot"], numbers["token"]) == (7, 2, "gripper")
    policy, frames, tokens, world = replay(gripper_run, SEED, True)
    rows = model_rows(policy, world.instruction, frames, tokens)            # (S, L, H, 3, T)
    image = payload["inputs"][7]["image"]
    off, n = image["patch_token_offset"], image["grid"][0] * image["grid"][1]
    heads = numbers["heads"]                          # the chosen heads: at first the layer's most focused one
    assert heads and set(heads) <= set(range(rows.shape[2]))
    want = rows[7, 0, heads, 2].mean(axis=0)                                # layer 0, the chosen heads' mean
    assert np.abs(np.array(numbers["patches"]) - want[off:off + n]).max() <= U8
    g = payload["inputs"][7]["groups"][0]
    for token, value in numbers["words"]:
        assert abs(value - want[g["key_tokens"].index(token)]) <= U8
    page.select_option("#episode-source", "relevance")
    assert page.evaluate(f"{state}.numbers.source") == "relevance"
    page.click("#episode-knockout")                                       # the step's knock-outs, for its token
    assert page.evaluate(f"[{state}.view, {state}.input, {state}.target]") == ["knockout", 7, 2]
    assert not o.errors, o.errors
    assert not o.foreign_requests(("file://", "data:"))


def test_serve_answers_a_new_instruction_and_seed_with_a_new_episode(gripper_run, opened):  # noqa: F811
    with serving(gripper_run, [{"seed": SEED}]) as srv:
        o = opened(srv.url)
        page = o.page
        page.fill("#serve-fields input[name='seed']", "11")
        page.fill("#serve-fields input[name='instruction']", "put the blue block in the bowl")
        page.click("#serve-submit")
        page.wait_for_selector("#episode-outcome:has-text('Episode 11')")
        assert "put the blue block in the bowl" in page.inner_text("#episode-outcome")
        assert page.evaluate("window.npformerPage.S.payload.episode.target") == ["blue", "bowl"]
        assert not o.errors, o.errors
        assert not o.foreign_requests((srv.url.split("?")[0],))


@pytest.mark.parametrize("argv,fragments", [
    (["--seed", "3", "--instruction", "put the pink block in the box"], ["unknown word 'pink'"]),
    (["hello"], ["--seed S, --instruction TEXT and --perturb"]),
    (["--target", "pick=3"], ["target is not taken on a gripper run"]),
])
def test_bad_input_is_one_line_and_exit_2(gripper_run, capsys, argv, fragments):  # noqa: F811
    assert main(["explore", str(gripper_run), *argv]) == 2
    one_line_error(capsys.readouterr().err, "npformer explore: error:", *fragments)


def test_the_command_writes_the_page(gripper_run, capsys, tmp_path):  # noqa: F811
    out = tmp_path / "ep.html"
    assert main(["explore", str(gripper_run), "--seed", "5", "--out", str(out)]) == 0
    assert capsys.readouterr().out.strip() == str(out)
    text = out.read_text(encoding="utf-8")
    assert re.search(r'"episode":\{"seed":5,', text) and "Episode" in text
