"""The explorer's episode view for a policy that acts over time (a gripper run: ``action_lm`` model).

    ex = open_explorer("runs/gripper")          # payload.open_explorer sends action_lm runs here (open_run)
    payload = ex.payload([{"seed": 3, "instruction": None, "perturb": 0}])

One input is an episode: evaluation episode ``seed`` of the run, the one ``npformer eval`` and ``npformer
act --seed`` play (``GripperEnv`` reset with ``gripper_policy.eval_episode_seed``; the instruction, and the
perturbations when asked), played greedily by the policy (``decode.act_tokens`` over the KV cache, as ``npformer act``
plays it). The page's inputs are then the episode's steps, one each: step t's frame, and the attention
of one eval-mode forward over that frame's prefix (words, patches) and the three action tokens the policy
read, teacher-forced on its own choice (BOS, dx, dy). ``ActionLM``'s prefix never reads an action token,
so this forward's rows equal the cached decode's (tests/decode/test_action_lm.py).

A step's group keeps the three action queries only (BOS, which chose dx; dx, which chose dy; dy, which
chose the gripper command) against every key, with 8-bit weights and no q, k, v: 50 steps of full
float32 q, k and v would be megabytes. Rollout and relevance (one backward per action slot, all steps
at once: the rows of a batch are independent) are those rows of the full maps. Knock-outs: every head
of every step, on the three chosen tokens, while the work stays within ``KNOCKOUT_SCORES``.

``payload["episode"]`` (docs/EXPLORE_FORMAT.md, "Episode") says what happened: the outcome, the path,
the perturbation events, and each step's tokens, top alternatives and the dx and dy distributions.
Dimension legend: S steps, L layers, H heads, W words, N patches, A = 3 action slots, T = W + N + A, B bins,
V_a action vocabulary.
"""
from __future__ import annotations

from functools import partial

import numpy as np

from . import capture as cap
from . import knockout as ko
from . import relevance as rel
from . import targets as tg
from .arrays import encode_array, map_array, mask_array
from .images import image_json, patch_labels
from .kinds import action_label
from .payload import RunExplorer, _as_model, _check_text, _model_info, _target, head_stats

SLOTS = ("dx", "dy", "gripper")
COMMANDS = ("open", "close", "done")
TOP = 5                                 # alternatives listed per action token
KNOCKOUT_SCORES = 1 << 26               # attention scores (copies x L x H x T x T) of all steps' knock-outs, at most
MAX_SEED = 2**63 - 1


def _episode_input(inp: dict) -> tuple[int, str | None, bool]:
    try:
        seed = int(inp.get("seed", 0) if inp.get("seed") is not None else 0)
    except (TypeError, ValueError):
        raise ValueError(f"seed must be an integer >= 0, got {inp.get('seed')!r}") from None
    if not 0 <= seed <= MAX_SEED:
        raise ValueError(f"seed must be in 0..{MAX_SEED}, got {seed}")
    instruction = inp.get("instruction") or None
    if instruction is not None:
        _check_text(instruction)
    perturb = inp.get("perturb", False)
    if perturb in (0, 1, True, False) and not isinstance(perturb, str):
        return seed, instruction, bool(perturb)
    raise ValueError(f"perturb must be 0 or 1, got {perturb!r}")


def play(policy, seed: int, instruction: str | None, perturb: bool) -> dict:
    """One greedy episode: {"frames": [(48, 48, 3) uint8] (S + 1), "tokens" (S, A), "dists" (S, A, V_a),
    "path" [(x, y, closed)] (S + 1), "world": the ended World, "outcome"}."""
    from ..sim.env import GripperEnv
    from ..sim.episodes import outcome

    options: dict = {"split": "test", "perturb": perturb}
    if instruction is not None:
        options["instruction"] = instruction
    env = GripperEnv()
    obs, info = env.reset(seed=seed, options=options)
    frames, path, tokens, dists = [obs["image"]], [info["gripper"]], [], []
    while True:
        tok, probs = policy.tokens(obs["image"][None], [obs["instruction"]])      # (1, A), (1, A, V_a)
        moves, gripper = policy.tokenizer.decode(tok)
        tokens.append(tok[0])
        dists.append(probs[0])
        action = {"move": np.clip(moves[0], -1.0, 1.0), "gripper": int(gripper[0])}
        obs, _, terminated, truncated, info = env.step(action)
        frames.append(obs["image"])
        path.append(info["gripper"])
        if terminated or truncated:
            break
    assert env.world is not None
    return {"frames": frames, "path": path, "tokens": np.stack(tokens), "dists": np.stack(dists),
            "world": env.world, "outcome": outcome(env.world)}


def open_run(run) -> EpisodeExplorer:
    """The explorer of an action_lm run (payload.open_explorer's RUN_MODULES names this module)."""
    return EpisodeExplorer(run)


def _copies(model, one: tuple, k: int) -> np.ndarray:
    """The logits (k, A, V_a) of k copies of one step's (words, images, actions_in): the knock-outs' runs. Float
    inputs take the model's dtype at call time: the knock-outs' noise floor runs the model in float64 too."""
    return model.forward(*(_as_model(np.repeat(x, k, 0), model) for x in one))[0]


class EpisodeExplorer(RunExplorer):
    """A gripper run: one episode by seed (an instruction, the perturbations); each step is a page input."""

    fields = [{"name": "instruction", "label": "instruction", "kind": "text", "default": ""},
              {"name": "seed", "label": "episode seed", "kind": "int", "default": 0},
              {"name": "perturb", "label": "perturb (0 or 1)", "kind": "int", "default": 0}]
    max_inputs = 1

    def __init__(self, run) -> None:
        super().__init__(run)
        self.kind = "action_lm"

    def _training(self) -> dict | None:
        return None                         # no training probe for a policy's steps

    def default_inputs(self) -> list[dict]:
        return [{"seed": 0}]

    def explain(self, inp: dict) -> dict:
        raise NotImplementedError("an episode is many inputs: use payload()")

    def payload(self, inputs: list[dict]) -> dict:
        if len(inputs) != 1:
            raise ValueError(f"a gripper run's page shows one episode: give one seed, got {len(inputs)} inputs")
        if inputs[0].get("target") not in (None, ""):
            raise tg.TargetError("target is not taken on a gripper run: each step explains the three action "
                                 "tokens the policy chose")
        seed, instruction, perturb = _episode_input(inputs[0])
        task, model = self.run.task, self.run.model
        policy = task.policy(model)
        if instruction is not None:
            from ..data.tabletop import model_words

            model_words(policy.reader, model, [instruction])              # an unknown word: one clear error
        from ..data.gripper_policy import eval_episode_seed
        from ..train.checkpoint import run_seed
        from ..train.trainer import _blas_threads

        # the run's BLAS threads (the gripper task's default: one): these matrices are 64 wide, and on shared
        # cores a second BLAS thread made this page 4x slower (15 s against 3.3 s, measured on 2 loaded cores)
        with _blas_threads((self.run.config.get("train") or {}).get("blas_threads")):
            ep = play(policy, eval_episode_seed(run_seed(self.run), seed), instruction, perturb)
            steps, episode = self._steps(policy, ep, seed)
        notes = ["Each input is one step of the episode: the three action tokens' attention rows (BOS chose dx, dx "
                 "chose dy, dy chose the gripper command), as 8-bit (round(w*255)); rollout as 8-bit, relevance as "
                 "float16; q, k and v are not stored (the step view is off).",
                 "Relevance: Chefer, Gur & Wolf 2021, gradients from npformer's own backward; "
                 "rollout: Abnar & Zuidema 2020 with the residual as 0.5 I."]
        out = {"version": 1, "title": self.title, "model": {"kind": self.kind, **_model_info(model.config)},
               "inputs": steps, "training": None, "notes": notes, "episode": episode}
        if self.layers is not None:
            from .layers import keep_layers

            out = keep_layers(out, *self.layers)
        return out

    def _labels(self, policy, instruction: str, n_words: int, words: np.ndarray) -> tuple[list[str], list[str]]:
        model = self.run.model
        real = int(model.word_mask(words)[0].sum())
        if not model.config.text_dim and hasattr(policy.reader, "tokens"):
            names = list(policy.reader.tokens(instruction))[:real]
        else:
            names = [f"w{j}" for j in range(real)]
        names += [f"w{j}" for j in range(len(names), real)]
        pads = n_words - real
        patches = patch_labels(model.config.image_size // model.config.patch_size)
        return (names + ["<pad>"] * pads + patches,
                ["word"] * real + ["pad"] * pads + ["patch"] * len(patches))

    def _steps(self, policy, ep: dict, seed: int) -> tuple[list[dict], dict]:
        from ..data.tabletop import model_words

        model, tok = self.run.model, policy.tokenizer
        world, frames, tokens = ep["world"], ep["frames"], ep["tokens"]               # tokens (S, A)
        n = len(tokens)
        words1 = model_words(policy.reader, model, [world.instruction])               # (1, W) or (1, W, S)
        words = np.repeat(words1, n, axis=0)                                           # (S, W...)
        images = np.stack(frames[:n]).astype(model.dtype) / model.dtype.type(255)     # (S, H, W, 3)
        actions_in = np.concatenate([np.full((n, 1), model.config.bos_id), tokens[:, :-1]], axis=1)  # (S, A)
        logits, cache = model.forward(words, images, actions_in)                       # (S, A, V_a)
        lay = model.layout(words.shape[1])
        acts = np.arange(lay["actions"].start, lay["actions"].stop)                    # (A,) query rows
        mask = model.attention_mask(words1, len(SLOTS))[0, 0]                          # (T, T)
        grads = [self._slot_grads(logits, cache, j, tokens[:, j]) for j in range(len(SLOTS))]
        keys, kinds = self._labels(policy, world.instruction, words.shape[1], words1)
        labels = [str(i) for i in range(tok.bins)] + list(COMMANDS)                   # each action id's name
        c = model.config
        per_copy = c.n_layers * c.n_heads * mask.shape[0] * mask.shape[0]              # scores of one forward
        knock_steps = max(0, min(n, KNOCKOUT_SCORES // (per_copy * (c.n_layers * c.n_heads + 1))))
        inputs, dists, top = [], [], []
        for i in range(n):
            g = cap.capture("action_lm", cache, {"self": mask}, index=i)["self"]
            key_labels = keys + [action_label("BOS"), action_label(f"dx={tokens[i, 0]}"),
                                 action_label(f"dy={tokens[i, 1]}")]
            chosen = [self._token_name(tok, j, int(tokens[i, j])) for j in range(len(SLOTS))]
            names = [f"{s}: {t}" for s, t in zip(SLOTS, chosen, strict=True)]
            relevance = {name: rel.self_relevance(g.weights, grads[j][:, i]) for j, name in enumerate(names)}
            choices = [tg.Target(j, int(tokens[i, j]), 0) for j in range(len(SLOTS))]
            targets = [_target(name, "self", j, f"logit of {SLOTS[j]} token {int(tokens[i, j])} (query "
                               f"{key_labels[acts[j]]}, position {acts[j]})", choices[j], SLOTS[j], chosen[j])
                       for j, name in enumerate(names)]
            knock = None
            if i < knock_steps:
                one = (words[i:i + 1], images[i:i + 1], actions_in[i:i + 1])
                knock = ko.knockout_json(model, "action_lm", {"self": g}, partial(_copies, model, one), choices,
                                         {"self": relevance}, names, {"self": [int(a) for a in acts]}, labels=labels)
                knock["groups"]["self"]["queries"] = list(range(len(SLOTS)))          # rows of the kept group
            move, grip = tok.decode(tokens[i:i + 1])
            inputs.append({"label": f"step {i + 1}: dx {move[0, 0]:+.3f}, dy {move[0, 1]:+.3f}, "
                                    f"{COMMANDS[int(grip[0])]}",
                           "output": ", ".join(names), "targets": targets, "knockout": knock,
                           "groups": [self._group(g, acts, key_labels, kinds + ["action"] * len(SLOTS), relevance)],
                           "image": image_json(frames[i] / 255.0, c.patch_size, lay["patches"].start),
                           "meta": {"instruction": world.instruction, "seed": seed, "perturb": int(world.perturb),
                                    "step": f"{i + 1} of {n}"}})
            p = ep["dists"][i]                                                         # (A, V_a)
            top.append([[[int(t), round(float(p[j, t]), 6)] for t in ids[np.argsort(-p[j, ids], kind="stable")[:TOP]]]
                        for j, ids in enumerate(policy.allowed)])                # the slot's own ids only
            dists.append(p[:2, :tok.bins])                                             # (2, B)
        episode = {
            "seed": seed, "instruction": world.instruction, "perturb": bool(world.perturb),
            "target": list(world.target), "outcome": ep["outcome"], "success": bool(world.success),
            "truncated": bool(world.truncated), "steps": n, "query_offset": int(acts[0]), "slots": list(SLOTS),
            "bins": tok.bins, "commands": list(COMMANDS), "knockout_steps": knock_steps,
            "events": [{"step": int(at), "kind": what, "colour": colour} for at, what, colour in world.events],
            "path": [[round(float(x), 5), round(float(y), 5), bool(closed)] for x, y, closed in ep["path"]],
            "tokens": tokens.astype(int).tolist(),
            "moves": [[round(float(v), 5) for v in m] for m in tok.decode(tokens)[0]],
            "top": top,
            "dists": encode_array(np.stack(dists), "f16"),                              # (S, 2, B)
            "final_image": image_json(frames[n] / 255.0, c.patch_size, lay["patches"].start),
        }
        return inputs, episode

    def _slot_grads(self, logits: np.ndarray, cache, slot: int, ids: np.ndarray) -> np.ndarray:
        """d logit[i, slot, ids[i]] / d weights of every step i at once, (L, S, H, T, T): one backward, the
        batch's rows being independent."""
        model = self.run.model
        d = np.zeros(logits.shape, dtype=logits.dtype)                                 # (S, A, V_a)
        d[np.arange(len(ids)), slot, ids] = 1.0
        with rel.reporting_weights_grad(model):
            _, grads = model.backward(d, cache)
        suffix = ".attention_weights"
        return rel.stacked({k[:-len(suffix)]: g for k, g in grads.items() if k.endswith(suffix)}, "encoder",
                           model.config.n_layers)

    @staticmethod
    def _token_name(tok, slot: int, t: int) -> str:
        return COMMANDS[t - tok.bins] if slot == 2 else f"bin {t}"

    @staticmethod
    def _group(g: cap.GroupParts, acts: np.ndarray, key_labels, key_kinds, relevance: dict) -> dict:
        """The step's group: the action queries' rows of the weights, rollout, relevance and mask."""
        n_layers, n_heads = g.weights.shape[:2]
        rows = g.weights[:, :, acts]                                                   # (L, H, A, T)
        return {
            "name": "self", "n_layers": n_layers, "n_heads": n_heads, "head_dim": g.q.shape[-1],
            "query_tokens": [key_labels[a] for a in acts], "key_tokens": list(key_labels),
            "token_kinds": {"query": ["action"] * len(acts), "key": list(key_kinds)},
            "q": None, "k": None, "v": None, "scale": g.scale,
            "mask": None if g.mask is None else mask_array(g.mask[acts]),
            "bias": None,
            "weights": encode_array(rows, "u8"),
            "rollout": encode_array(rel.rollout(g.weights)[:, acts], "u8"),
            "relevance": {t: map_array(r[acts]) for t, r in relevance.items()},
            "stats": head_stats(g.weights, g.mask),
        }
