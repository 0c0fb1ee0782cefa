"""The gripper task: a policy that acts over time, trained by behaviour cloning (``npformer train gripper``).

The world is ``npformer.sim``: a 48 x 48 image and an instruction in, a move and a gripper command out,
for up to 50 steps. The policy is an ``ActionLM`` (a prefix-LM over the instruction's words, the image's
patches and the step's action tokens), and the data are the scripted expert's demonstrations recorded
with DART noise (``sim.demos``): each recorded step is one example, (instruction, image) -> the expert's
clean action as three tokens (dx, dy, gripper; ``sim.tokens.ActionTokenizer``).

- Demonstrations are generated on the fly when the task first needs them, from ``demo_seed`` on their own
  seed stream (``sim.demos.DEMO_STREAM``; evaluation episodes come from ``sim.episodes.EVAL_STREAM``), so a
  resumed run, or a torch worker, records the same ones. Nothing is written to disk.
- The action tokenizer is fitted on them (the 1st and 99th percentiles of each move axis) when the run
  starts, and saved in config.json's data settings (``tokenizer``); a bad value there is refused when the
  run loads, naming config.json and the field.
- Scoring (``evaluate``): success over n fresh episodes of the "test" split and of the held-out
  "yellow_bowl" split, played batched (``sim.episodes.run_episodes``), with Wilson intervals, the
  outcome counts, the truncated count and the mean episode length.

Dimension legend: B examples, L words (or word pieces), S text-state width, H = W = 48 pixels.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ops import sinusoidal_positions_2d
from ..sim.demos import Demos, record_demos
from ..sim.episodes import EVAL_STREAM, play, run_episodes, summarize
from ..sim.expert import EXPERTS
from ..sim.language import TABLE, parse
from ..sim.tokens import TOKENS_PER_STEP, ActionTokenizer
from ..sim.world import GRIPPER_DONE, GRIPPER_OPEN, IMAGE_SIZE, PATCH_SIZE, episode_seed
from .gripper_chunks import check_chunk_settings, chunk_targets, evaluate_chunks
from .gripper_policy import GripperPolicy
from .tabletop import MAX_WORDS, TEXT_ENCODERS, UNK, UNK_ID, VOCAB, model_words, real_words, text_reader
from .tasks import Batch, Task

N_PATCHES = (IMAGE_SIZE // PATCH_SIZE) ** 2
PIXEL_SCALE = 0.25                      # the patch embedding starts as if pixels were (x - TABLE) / PIXEL_SCALE
LINES_STREAM = EVAL_STREAM + 1          # ``--instructions``: line k's episodes, apart from the plain evaluation's


def goal_cells(points: np.ndarray) -> np.ndarray:
    """points (M, 2) float (x, y) on the table -> (M,) int64, the index of the patch each lies in (row-major,
    as ``PatchEmbedding`` orders the patches; a point on the far edge belongs to the last row or column)."""
    grid = IMAGE_SIZE // PATCH_SIZE
    col, row = (np.minimum((np.asarray(points, dtype=np.float64) * grid).astype(np.int64), grid - 1)).T
    return row * grid + col


def mask_unneeded_word(texts: list[str], carrying: np.ndarray, mask: np.ndarray) -> list[str]:
    """``texts`` with, where ``mask``, the word the step's action does not need replaced by [UNK]: the
    container's name while the expert heads for the block (``carrying`` False), the block's colour while it
    carries the block to the container (``carrying`` True; ``sim.expert.carrying``). No held-out pairing is
    made: a masked instruction names the colour alone or the container alone."""
    out = []
    for text, carry, m in zip(texts, carrying, mask, strict=True):
        if m:
            colour, container = parse(text)
            word = colour if carry else container
            text = " ".join(UNK if w == word else w for w in text.split())
        out.append(text)
    return out


def release_rows(demos: Demos) -> np.ndarray:
    """(M,) bool: the recorded steps whose label ends the carry, the expert opening with the named block
    over the container, or saying "done"."""
    return ((demos.gripper == GRIPPER_OPEN) & demos.carrying) | (demos.gripper == GRIPPER_DONE)


def trim_padding(words: np.ndarray) -> np.ndarray:
    """words (B, L) ids or (B, L, S) text states without the trailing columns that are padding in every row
    (at least one column kept). The same sums: a padded word is never read as a key, and the real words
    keep their positions; the sequence is shorter (the instructions have about 7 of the 16 slots)."""
    real = (words != 0).any(axis=-1) if words.ndim == 3 else words != 0      # (B, L)
    cols = np.flatnonzero(real.any(axis=0))
    return words[:, :int(cols[-1]) + 1 if len(cols) else 1]


class GripperTask(Task):
    name = "gripper"
    model_kind = "action_lm"
    primary_metric = "success"
    higher_is_better = True
    description = "a policy that acts over time: move the gripper, pick the named block, put it in the named container"

    @dataclass
    class Settings:
        demos: int = 1000                   # demonstration episodes (DART), recorded when the task first needs them
        labels: int = 0                     # > 0: exactly this many recorded steps (demos is then the most episodes
                                            # taken; the drift study gives each arm the same number of labels)
        # bins per move axis. RT-2 and OpenVLA use 256; 32 trains better here (docs/vla.md): after 1,500 steps
        # the 32-bin policy's held-out gripper-token accuracy was 0.91, the 256-bin one's 0.53 after 2,500
        action_bins: int = 32
        chunk: int = 1                      # steps of actions per prediction (3 tokens each; gripper_chunks)
        execute: str = "first"              # how chunks are executed: "chunk", "first" or "ensemble"
        ensemble_m: float = 0.1             # temporal ensembling: prediction i (0 = oldest) weighs exp(-m i)
        dagger: int = 0                     # DAgger rounds (0: none; gripper_dagger); the labels split evenly
        round_steps: int = 0                # DAgger: optimizer steps per round (0: the recipe's steps / rounds)
        text_encoder: str = "scratch"       # "scratch" (the policy's own word table) or "minilm" (frozen MiniLM)
        # the goal head (ActionLM's goal_head): a pointer from the step's first action slot to the patch the
        # expert heads for, trained beside the action tokens (docs/vla.md: without it the policy took
        # thousands of steps more to find the named block at all)
        goal: bool = True
        # the chance that a training example's instruction has the container's name masked ([UNK]) while
        # the expert heads for the block (``mask_unneeded_word``), so that finding the block does not lean on
        # which container is named. Off by default: it helped the yellow-with-bowl split find its block
        # and cost the plain split more than it gave (docs/vla.md, one run each)
        container_mask: float = 0.0
        # the same for the block's colour while the expert carries the block to the container (the move
        # then does not depend on it). Off by default: with both masks at 0.5 the policy found the yellow
        # block but still carried it to the box as often (docs/vla.md, one run)
        colour_mask: float = 0.0
        # how many times more often a training batch draws the steps where the expert releases the block
        # over the container or says "done" (``release_rows``), one of each an episode; the policy's
        # commonest failure is "done" said holding the block there. Off (1) by default: at 3 that failure
        # halved and finding the block suffered more (docs/vla.md, one run)
        release_weight: float = 1.0
        # the chance that a recorded step past the named block (held, or in place: ``expert.carrying``) shows
        # that block in another palette colour (never yellow, the held-out pairing's; ``sim.demos.recoloured``),
        # so that where it goes cannot lean on how it looks. Off by default: alone and with either mask it
        # lowered both splits (docs/vla.md, seed 0, 2026-12-05)
        held_recolour: float = 0.0
        # which scripted expert labels the demonstrations (``sim.expert.EXPERTS``): "settle" moves axis by axis
        # and closes or opens once on its goal; "straight" heads straight for it and closes or opens on the
        # step it arrives (on seeds 0 and 1 it lowered yellow-with-bowl by 21 and 48 points: docs/vla.md)
        expert: str = "settle"
        # the split the demonstrations are drawn from: "train" never pairs yellow with the bowl; "all" is a
        # control that does (about one instruction in ten), measuring what the held-out pairing costs
        demo_split: str = "train"
        noise: float = 0.3                  # DART: std of the noise added to the executed move (action units)
        flip: float = 0.05                  # DART: chance a step's executed open/close is flipped
        perturb: float = 0.5                # share of demonstration episodes recorded with the perturbations on
        eval_size: int = 500                # episodes per split when evaluating with no --n
        demo_seed: int | None = None        # the demonstrations' seed (None: drawn from the run's seed at start)
        tokenizer: dict | None = None       # the action tokenizer {"bins", "low", "high"}, fitted at start

        def __post_init__(self) -> None:
            for name, low in (("demos", 1), ("labels", 0), ("action_bins", 2), ("chunk", 1), ("eval_size", 1)):
                v = getattr(self, name)
                if isinstance(v, bool) or not isinstance(v, int) or v < low:
                    raise ValueError(f"{name} must be an integer >= {low}, got {v!r}")
            check_chunk_settings(self)
            if self.labels and self.chunk > 1:
                raise ValueError(f"labels ({self.labels}) cuts the last episode, whose chunks would end in made-up "
                                 f"'done' steps: use it with chunk 1, got chunk {self.chunk}")
            if self.labels and self.dagger and self.labels < self.dagger:
                raise ValueError(f"labels ({self.labels}) must be at least dagger ({self.dagger}): each round "
                                 "gets labels / dagger of them")
            if self.expert not in EXPERTS:
                raise ValueError(f"expert must be one of {', '.join(EXPERTS)}, got {self.expert!r}")
            if self.demo_split not in ("train", "all"):
                raise ValueError(f"demo_split must be 'train' or 'all', got {self.demo_split!r}")
            if self.text_encoder not in TEXT_ENCODERS:
                raise ValueError(f"text_encoder must be one of {', '.join(TEXT_ENCODERS)}, got {self.text_encoder!r}")
            for name in ("noise", "flip", "perturb", "container_mask", "colour_mask", "held_recolour"):
                v = getattr(self, name)
                if not np.isfinite(v) or v < 0 or (name != "noise" and v > 1):
                    raise ValueError(f"{name} must be {'>= 0' if name == 'noise' else 'in [0, 1]'}, got {v!r}")
            if not np.isfinite(self.release_weight) or not 1 <= self.release_weight <= 100:
                raise ValueError(f"release_weight must be in [1, 100], got {self.release_weight!r}")
            if self.demo_seed is not None and self.demo_seed < 0:
                raise ValueError(f"demo_seed must be >= 0, got {self.demo_seed}")
            if self.tokenizer is not None:
                try:
                    tok = ActionTokenizer.from_dict(self.tokenizer)
                except ValueError as e:
                    raise ValueError(f"data.tokenizer: {e}") from None
                if tok.bins != self.action_bins:
                    raise ValueError(f"data.tokenizer has {tok.bins} bins, but action_bins is {self.action_bins}")

    settings: Settings

    def __init__(self, settings=None) -> None:
        super().__init__(settings)
        self._demos: Demos | None = None
        self.first_rows = 0                     # the steps recorded first (DAgger: round 1's), set by demos()
        self.dagger_calls = 0                   # DAgger: loss calls so far (a round ends every round_steps)
        self._row_cdf: tuple[int, np.ndarray] | None = None   # release_weight's draw: (rows, cumulative weights)

    # -- reading and the tokenizer ------------------------------------------------------------------
    @property
    def reader(self):
        """What turns instructions into the model's words (tabletop's readers: ``ScratchText``, MiniLM)."""
        return text_reader(self.settings.text_encoder)

    @property
    def tokenizer(self) -> ActionTokenizer:
        """The action tokenizer saved in the settings (fitted when the run started)."""
        if self.settings.tokenizer is None:
            raise ValueError("the gripper task has no action tokenizer yet: it is fitted when a run starts")
        return ActionTokenizer.from_dict(self.settings.tokenizer)

    def demos(self) -> Demos:
        """The demonstrations, recorded on first use from ``demo_seed`` (the same ones every time)."""
        if self._demos is None:
            s = self.settings
            if s.demo_seed is None:
                raise ValueError("the gripper task has no demo_seed yet: it is drawn when a run starts")
            first = s.demos // s.dagger if s.dagger else s.demos     # DAgger: round 1's share of the labels
            labels = (s.labels // s.dagger if s.dagger else s.labels) or None
            self._demos = record_demos(max(1, first), s.demo_seed, noise=s.noise, flip=s.flip, split=s.demo_split,
                                       perturb=s.perturb, max_steps=labels, recolour=s.held_recolour,
                                       expert=s.expert)
            self.first_rows = len(self._demos)
        return self._demos

    # -- the model ----------------------------------------------------------------------------------
    def default_model_config(self) -> dict:
        s = self.settings
        cfg = {"vocab_size": len(VOCAB), "max_words": MAX_WORDS, "image_size": IMAGE_SIZE, "patch_size": PATCH_SIZE,
               "in_channels": 3, "action_vocab": s.action_bins + 3, "action_len": TOKENS_PER_STEP * s.chunk,
               "d_model": 64, "n_heads": 4, "d_ff": 256, "n_layers": 3, "dropout": 0.0, "goal_head": s.goal}
        if s.text_encoder != "scratch":
            # as tabletop's MiniLM policy: 30% of the projected text features dropped, so that it reads the
            # broad directions paraphrases share rather than the few that tell the template words apart
            cfg.update(text_dim=self.reader.text_dim, max_words=self.reader.max_words, text_dropout=0.3)
        return cfg

    def build_model(self, config, rng: np.random.Generator):
        """The model; for a new run (no tokenizer in the settings yet) also draws ``demo_seed`` from ``rng``
        (unless set), records the demonstrations and fits the tokenizer, which config.json then keeps."""
        s = self.settings
        if s.tokenizer is None:
            if s.demo_seed is None:
                s.demo_seed = int(rng.integers(0, 2**31 - 1))
            s.tokenizer = ActionTokenizer.fit(self.demos().moves, s.action_bins).to_dict()
        model = super().build_model(config, rng)
        c = model.config
        want = {"action_vocab": s.action_bins + 3, "action_len": TOKENS_PER_STEP * s.chunk,
                "text_dim": self.reader.text_dim, "goal_head": s.goal}
        for key, v in want.items():
            if getattr(c, key) != v:
                raise ValueError(f"the gripper task's settings (action_bins {s.action_bins}, chunk {s.chunk}, "
                                 f"text_encoder {s.text_encoder!r}, goal {s.goal}) need model.{key} = {v}, "
                                 f"got {getattr(c, key)}")
        if not c.text_dim and c.vocab_size == len(VOCAB):
            model.word_embed.tok.params["weight"][UNK_ID] = 0      # as tabletop: [UNK] has no content of its own
        # Where the policy starts, for the image (measured on a probe, "is the gripper in the right half", 400
        # steps: with the defaults of a ViT it stays at chance; with these two it reads 0.96):
        # - the patches' learned positions start as 2-D sinusoids (MAE's fixed table), not N(0, 0.02): the
        #   action is a difference of two places in the image, and a 0.02 table hides where a patch is;
        # - the patch embedding starts as if the pixels were normalised, (x - table) / 0.25, the usual input
        #   normalisation folded into W and b: an object then stands out of the table's patches.
        grid = c.image_size // c.patch_size
        pe = model.patch_embed.params
        pe["pos_embed"][0] = sinusoidal_positions_2d(grid, grid, c.d_model, model.dtype)
        pe["weight"] *= pe["weight"].dtype.type(1 / PIXEL_SCALE)                                   # (E, C, P, P)
        pe["bias"][:] = -np.einsum("ecpq,c->e", pe["weight"], np.asarray(TABLE, dtype=pe["weight"].dtype))
        return model

    def default_train_config(self) -> dict:
        # sized to finish, with its evaluations, within 10 minutes on 2 cores. BLAS on numpy's threads
        # (both cores): the products are most of a step, and 2 threads ran the steps 1.2x as fast as one;
        # with the faster layer norm and GELU twins, 7,000 steps fit where 5,500 did (docs/vla.md has the
        # times and the successes of both)
        return {"steps": 7000, "batch_size": 64, "schedule": "cosine", "lr": 2e-3, "warmup": 100,
                "optimizer": "adamw", "weight_decay": 0.01, "label_smoothing": 0.0, "eval_every": 1500,
                "eval_n": 100}

    # -- training -----------------------------------------------------------------------------------
    def examples(self, demos: Demos, rows: np.ndarray, texts: list[str] | None = None):
        """The model's arrays for recorded steps ``rows``: (words, images float [0, 1], actions_in
        [BOS, t0, t1], targets [t0, t1, t2]). ``texts``: the instructions to read instead of the rows' own
        (``mask_unneeded_word``'s; [UNK] is then read as the unknown word)."""
        tokens = chunk_targets(self.tokenizer, demos, rows, self.settings.chunk)   # (B, 3 K)
        bos = np.full((len(rows), 1), self.settings.action_bins + 3, dtype=np.int64)  # (B, 1)
        words = (self.reader.inputs(demos.texts(rows)) if texts is None
                 else self.reader.inputs(texts, unknown_ok=True))                    # (B, L) or (B, L, S)
        images = demos.images[rows].astype(np.float32) / np.float32(255)            # (B, H, W, 3)
        return words, images, np.concatenate([bos, tokens[:, :-1]], axis=1), tokens

    def train_batch(self, rng: np.random.Generator, batch_size: int) -> Batch:
        demos = self.demos()
        rows = self.draw_rows(rng, batch_size)
        texts = None
        if self.settings.container_mask or self.settings.colour_mask:
            carry = demos.carrying[rows]                                              # (B,)
            drop = rng.random(batch_size) < np.where(carry, self.settings.colour_mask,
                                                     self.settings.container_mask)    # (B,)
            texts = mask_unneeded_word(demos.texts(rows), carry, drop)
        words, images, actions_in, targets = self.examples(demos, rows, texts)
        words = trim_padding(words)
        n_tokens = real_words(words) + batch_size * (N_PATCHES + TOKENS_PER_STEP * self.settings.chunk)
        arrays = (words, images, actions_in, targets) + ((goal_cells(demos.goals[rows]),) if self.settings.goal else ())
        return Batch(arrays, n_tokens=n_tokens, n_inputs=3)

    def draw_rows(self, rng: np.random.Generator, batch_size: int) -> np.ndarray:
        """A batch's recorded steps (B,) int64, uniform, or with ``release_rows`` drawn ``release_weight``
        times as often as the rest."""
        demos = self.demos()
        if self.settings.release_weight == 1.0:
            return rng.integers(0, len(demos), batch_size)
        if self._row_cdf is None or self._row_cdf[0] != len(demos):     # DAgger's rounds add rows
            w = np.where(release_rows(demos), self.settings.release_weight, 1.0)      # (M,)
            self._row_cdf = (len(demos), np.cumsum(w) / w.sum())
        cdf = self._row_cdf[1]
        return np.minimum(np.searchsorted(cdf, rng.random(batch_size), side="right"), len(cdf) - 1)

    def loss(self, model, batch: Batch, rng: np.random.Generator | None, label_smoothing: float = 0.0):
        if self.settings.dagger:                # at a round's end the policy drives and the expert labels
            from .gripper_dagger import dagger_step
            dagger_step(self, model)
        return super().loss(model, batch, rng, label_smoothing)

    # -- scoring ------------------------------------------------------------------------------------
    def policy(self, model, unknown_ok: bool = False, temperature: float = 0.0, seed: int | None = None):
        return GripperPolicy(model, self.tokenizer, self.reader, temperature=temperature, seed=seed,
                             unknown_ok=unknown_ok)

    def evaluate(self, model, n: int | None = None, seed: int = 0, perturb: bool = False) -> dict:
        """``n`` fresh episodes of the "test" split and ``n`` of "yellow_bowl" (episode i from (seed,
        EVAL_STREAM, i)), played by the greedy policy: success and its Wilson interval, the outcomes, the
        truncated count and the mean steps of the test split; yellow_bowl_success and its interval."""
        n = self.settings.eval_size if n is None else int(n)
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        if self.settings.chunk > 1:                              # chunks are executed as ``execute`` says
            return evaluate_chunks(self, model, n, seed, perturb=perturb)
        act = self.policy(model).act_batch
        _, test = run_episodes(act, n, seed, split="test", perturb=perturb)
        _, yellow = run_episodes(act, n, seed, split="yellow_bowl", perturb=perturb)
        return {"success": test["success"], "success_ci95": test["success_ci95"],
                "yellow_bowl_success": yellow["success"], "yellow_bowl_ci95": yellow["success_ci95"],
                "n": n, "perturb": bool(perturb), "mean_steps": test["mean_steps"], "truncated": test["truncated"],
                "outcomes": test["outcomes"]}

    def evaluate_lines(self, model, lines: list, n: int, seed: int = 0, perturb: bool = False) -> dict:
        """``npformer eval --instructions``: lines [(source, line number, instruction, colour, container)];
        each line gets max(1, n // lines) fresh episodes whose scene holds that block and container (line
        k's episode j from (seed, LINES_STREAM, k * per_line + j)), all played in one batch. The overall
        success is the mean over lines; each file's and each line's success are given too."""
        if not lines:
            raise ValueError("no instructions given")
        per_line = max(1, n // len(lines))
        policy = self.policy(model, unknown_ok=True)
        for source, number, text, _, _ in lines:                                   # every line checked first
            try:
                model_words(self.reader, model, [text], unknown_ok=True)
            except ValueError as e:
                raise ValueError(f"{source} line {number}: {e}") from None
        seeds = [episode_seed(seed, LINES_STREAM, i) for i in range(per_line * len(lines))]
        options = [{"split": "test", "perturb": bool(perturb), "instruction": text, "target": (colour, container)}
                   for _, _, text, colour, container in lines for _ in range(per_line)]
        results, _ = play(policy.act_batch, seeds, options)
        rows = []
        for k, (source, number, text, colour, container) in enumerate(lines):
            mine = results[k * per_line:(k + 1) * per_line]
            rows.append({"file": source, "line": number, "instruction": text, "colour": colour,
                         "container": container, "success": sum(r.success for r in mine) / len(mine),
                         "unknown_words": self.reader.unknown(text)})
        files = []
        for source in dict.fromkeys(r["file"] for r in rows):
            scores = [float(r["success"]) for r in rows if r["file"] == source]
            files.append({"file": source, "n_lines": len(scores), "success": float(np.mean(scores))})
        summary = summarize(results)
        return {"success": float(np.mean([r["success"] for r in rows])), "n_lines": len(rows),
                "episodes_per_line": per_line, "n": per_line * len(rows), "perturb": bool(perturb),
                "text_encoder": self.reader.name, "outcomes": summary["outcomes"], "truncated": summary["truncated"],
                "mean_steps": summary["mean_steps"], "files": files, "lines": rows}

    def token_accuracy(self, model, n_episodes: int, seed: int, batch_size: int = 256) -> dict:
        """Teacher-forced action-token accuracy on ``n_episodes`` demonstrations recorded from ``seed`` (give
        one other than ``demo_seed`` for held-out ones): the share of tokens whose argmax over their slot's
        allowed ids is the expert's, per slot ("dx", "dy", "gripper") and over all three ("all")."""
        s = self.settings
        demos = record_demos(n_episodes, seed, noise=s.noise, flip=s.flip, split="train", perturb=s.perturb,
                             expert=s.expert)
        tok = self.tokenizer
        allowed = [tok.allowed(j) for j in range(model.config.action_len)]
        right = np.zeros(len(allowed))                                                 # (A,)
        for i in range(0, len(demos), batch_size):
            rows = np.arange(i, min(i + batch_size, len(demos)))
            _, images, actions_in, targets = self.examples(demos, rows)
            words = model_words(self.reader, model, demos.texts(rows))
            logits, _ = model.forward(words, images.astype(model.dtype), actions_in)   # (B, A, V_a)
            for j, ids in enumerate(allowed):
                pred = ids[logits[:, j, ids].argmax(axis=-1)]                           # (B,)
                right[j] += int((pred == targets[:, j]).sum())
        acc = right / len(demos)
        return {"dx": float(acc[0]), "dy": float(acc[1]), "gripper": float(acc[2]), "all": float(acc.mean())}
