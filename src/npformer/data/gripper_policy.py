"""A trained gripper policy (``npformer train gripper``) acting in the world, one step at a time.

    policy = npformer.load_policy("runs/gripper")      # GripperPolicy, greedy
    obs, info = env.reset(seed=3)
    policy.reset()
    while True:
        obs, reward, terminated, truncated, info = env.step(policy.act(obs))
        if terminated or truncated:
            break

Each step: the instruction's words and the image's patches form the prefix, computed once; the step's
action tokens (dx, dy, gripper) decode one after another over the KV cache (``decode.act_tokens``), each
restricted to the ids its slot may hold (``ActionTokenizer.allowed``), and the tokenizer turns them back
into a move and a command. ``act_batch`` serves many episodes with one forward
(``sim.episodes.run_episodes`` calls it once per step).

Dimension legend: B episodes, H = W = 48 pixels, A action slots (3).
"""
from __future__ import annotations

import numpy as np

from ..decode.action_lm import act_tokens
from ..sim.tokens import ActionTokenizer
from .tabletop import model_words


class GripperPolicy:
    """An ``ActionLM`` with its action tokenizer and text reader. Greedy at temperature 0; with temperature
    > 0 each token is drawn from softmax(logits / temperature) with a generator seeded by ``seed``.
    ``unknown_ok``: a word the scratch policy's vocabulary lacks is read as its [UNK] token instead of
    being refused (``npformer eval --instructions``)."""

    def __init__(self, model, tokenizer: ActionTokenizer, reader, temperature: float = 0.0, seed: int | None = None,
                 unknown_ok: bool = False) -> None:
        if not (isinstance(temperature, (int, float)) and np.isfinite(temperature) and temperature >= 0):
            raise ValueError(f"temperature must be a finite number >= 0, got {temperature!r}")
        if tokenizer.vocab_size != model.config.action_vocab:
            raise ValueError(f"the tokenizer has {tokenizer.vocab_size} action tokens, the model "
                             f"{model.config.action_vocab}")
        self.model, self.tokenizer, self.reader = model, tokenizer, reader
        self.temperature, self.unknown_ok = float(temperature), unknown_ok
        self.rng = np.random.default_rng(seed) if temperature > 0 else None
        self.allowed = [tokenizer.allowed(j) for j in range(model.config.action_len)]
        self.steps = 0                                        # steps of the current episode (``act``)
        self.last: dict = {}                                  # the last step's tokens and probabilities

    def reset(self) -> None:
        """Before each episode: the step count starts again (a policy over chunks would drop its queue)."""
        self.steps = 0
        self.last = {}

    def tokens(self, images: np.ndarray, instructions: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """images (B, H, W, 3) uint8, one instruction each -> (tokens (B, A) int64, probs (B, A, V_a))."""
        images = np.asarray(images)
        if images.dtype != np.uint8 or images.ndim != 4:
            raise ValueError(f"images must be (B, H, W, 3) uint8, got {images.dtype} {images.shape}")
        if len(instructions) != len(images):
            raise ValueError(f"need one instruction per image, got {len(instructions)} for {len(images)}")
        m = self.model
        words = model_words(self.reader, m, list(instructions), unknown_ok=self.unknown_ok)  # (B, L) or (B, L, S)
        pixels = images.astype(m.dtype) / m.dtype.type(255)                                 # (B, H, W, 3)
        return act_tokens(m, words, pixels, self.allowed, self.temperature, self.rng)

    def act_batch(self, images: np.ndarray, instructions: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """One step for B episodes: (moves (B, 2) float32, gripper (B,) int64)."""
        tokens, probs = self.tokens(images, instructions)
        self.last = {"tokens": tokens, "probs": probs}
        return self.tokenizer.decode(tokens[:, :3])

    def act(self, obs: dict) -> dict:
        """One observation {"image": (48, 48, 3) uint8, "instruction": str} -> an action the environment
        accepts: {"move": float32 (2,) in [-1, 1], "gripper": 0 open | 1 close | 2 done}."""
        if not isinstance(obs, dict) or "image" not in obs or "instruction" not in obs:
            raise ValueError("obs must be the environment's observation: a dict with 'image' and 'instruction'")
        moves, gripper = self.act_batch(np.asarray(obs["image"])[None], [obs["instruction"]])
        self.steps += 1
        return {"move": np.clip(moves[0], -1.0, 1.0).astype(np.float32), "gripper": int(gripper[0])}


def eval_episode_seed(run_seed: int, s: int) -> int:
    """The environment seed of evaluation episode ``s`` of a gripper run trained with seed ``run_seed``
    (``train.checkpoint.run_seed`` reads it from a run): ``episode_seed(run_seed, EVAL_STREAM, s)``, as
    ``npformer eval`` draws its episode s, so that ``npformer act`` and ``npformer explore`` with ``--seed
    s`` show that episode."""
    from ..sim.episodes import EVAL_STREAM
    from ..sim.world import episode_seed

    return episode_seed(run_seed, EVAL_STREAM, s)


def play_episode(policy: GripperPolicy, seed: int, instruction: str | None = None, perturb: bool = False,
                 split: str = "test") -> dict:
    """One episode of ``GripperEnv`` reset with ``seed`` (and the instruction, when given), played by
    ``policy``. Returns {"frames": [(48, 48, 3) uint8] (the first observation and one after each step),
    "actions": [action dicts], "probs": [each step's (A,) probability of its chosen tokens], "world": the
    ended World, "outcome": ``sim.episodes.outcome``}."""
    from ..sim.env import GripperEnv
    from ..sim.episodes import outcome

    options = {"split": split, "perturb": bool(perturb)}
    if instruction is not None:
        options["instruction"] = instruction
    env = GripperEnv()
    obs, _ = env.reset(seed=seed, options=options)
    policy.reset()
    frames, actions, probs = [obs["image"]], [], []
    while True:
        action = policy.act(obs)
        tokens, p = policy.last["tokens"][0], policy.last["probs"][0]          # (A,), (A, V_a)
        probs.append(p[np.arange(len(tokens)), tokens])                        # (A,)
        actions.append(action)
        obs, _, terminated, truncated, _ = env.step(action)
        frames.append(obs["image"])
        if terminated or truncated:
            break
    world = env.world
    assert world is not None
    return {"frames": frames, "actions": actions, "probs": probs, "world": world, "outcome": outcome(world),
            "instruction": world.instruction}
