"""Plain Hugging Face BERT-family directories against transformers, in float32: models that transformers
itself builds from random weights and saves with save_pretrained (safetensors), at configurations other
than MiniLM's, with MiniLM's own tokenizer.json (its 30,522 pieces are every config's vocab_size).

    bert-wide     BertForMaskedLM (weights under bert., the MLM head beside them): E 48, 3 heads, 3 layers,
                  FFN 80, 40 positions, GELU
    bert-relu     BertModel (no prefix): E 32, 2 heads, 2 layers, FFN 96, 24 positions, ReLU, eps 1e-7,
                  one token type
    roberta       RobertaForMaskedLM: positions from pad_token_id + 1 = 2, 34 rows (32 usable), eps 1e-5,
                  one token type
    distilbert    DistilBertForSequenceClassification: its own names, no token types

Every layer's hidden states (the padded forward, layer by layer) and the mean-pooled embedding (the
packed path, SentenceEncoder.encode) within 1e-4 of transformers'; texts up to the model's limit, so
the last row of each position table is used. Every weight, LayerNorm and bias included, is drawn at
random: transformers' init leaves biases at zero, which would hide a bias put in the wrong place."""
import shutil

import numpy as np
import pytest

from oracles import minilm_dir, require

torch = require("torch")
transformers = require("transformers")

from npformer.pretrained import SentenceEncoder  # noqa: E402

CONFIGS = {
    "bert-wide": ("BertConfig", "BertForMaskedLM", {"hidden_size": 48, "num_attention_heads": 3,
                                                   "num_hidden_layers": 3, "intermediate_size": 80,
                                                   "max_position_embeddings": 40}),
    "bert-relu": ("BertConfig", "BertModel", {"hidden_size": 32, "num_attention_heads": 2, "num_hidden_layers": 2,
                                             "intermediate_size": 96, "max_position_embeddings": 24,
                                             "hidden_act": "relu", "layer_norm_eps": 1e-7, "type_vocab_size": 1}),
    "roberta": ("RobertaConfig", "RobertaForMaskedLM", {"hidden_size": 32, "num_attention_heads": 4,
                                                        "num_hidden_layers": 2, "intermediate_size": 64,
                                                        "max_position_embeddings": 34, "pad_token_id": 1,
                                                        "type_vocab_size": 1, "layer_norm_eps": 1e-5}),
    "distilbert": ("DistilBertConfig", "DistilBertForSequenceClassification",
                   {"dim": 32, "n_heads": 4, "n_layers": 2, "hidden_dim": 64, "max_position_embeddings": 30}),
}
LIMITS = {"bert-wide": 40, "bert-relu": 24, "roberta": 32, "distilbert": 30}      # pieces, [CLS] and [SEP] included
WORDS = "the robot picks up a red block and puts it in the blue bowl on a table quickly".split()


def texts() -> list[str]:
    rng = np.random.default_rng(3)
    return ["", "Hello", "A man is playing a guitar.", " ".join(rng.choice(WORDS, 11)), " ".join(rng.choice(WORDS, 60))]


def randomise(model, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen, dtype=p.dtype)
            norm = "LayerNorm.weight" in name or "layer_norm.weight" in name
            p.copy_(1.0 + 0.1 * noise if norm else 0.2 * noise)


def build(kind: str, d):
    """transformers' model of ``kind`` with random weights, saved to ``d`` with MiniLM's tokenizer.json;
    returns its encoder (the base model), in eval mode."""
    cfg_cls, model_cls, fields = CONFIGS[kind]
    cfg = getattr(transformers, cfg_cls)(vocab_size=30522, attn_implementation="eager", **fields)
    torch.manual_seed(0)
    model = getattr(transformers, model_cls)(cfg).eval()
    randomise(model, seed=len(kind))
    model.save_pretrained(d, safe_serialization=True)
    shutil.copy(minilm_dir() / "tokenizer.json", d / "tokenizer.json")
    return model.base_model


@pytest.fixture(scope="module", params=list(CONFIGS))
def built(request, tmp_path_factory):
    d = tmp_path_factory.mktemp(request.param)
    base = build(request.param, d)
    return request.param, d, base, SentenceEncoder.load(d)


def reference(base, ids: np.ndarray, mask: np.ndarray):
    """transformers' hidden states: a tuple of L + 1 arrays (B, T, E), embeddings first."""
    with torch.inference_mode():
        out = base(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask.astype(np.int64)),
                   output_hidden_states=True)
    return [h.numpy() for h in out.hidden_states]


def test_the_directory_is_what_transformers_saved(built):
    kind, d, _, enc = built
    assert (d / "model.safetensors").is_file() and not (d / "modules.json").exists()
    assert enc.plain and enc.model.config.model_type == kind.split("-")[0]
    assert enc.tokenizer.max_length == LIMITS[kind] == enc.model.config.max_position_embeddings


def test_every_layers_hidden_states_match_transformers(built):
    kind, _, base, enc = built
    seqs = enc.tokenizer.encode(texts())
    assert max(len(s) for s in seqs) == LIMITS[kind]                        # the last position row is used
    ids, mask = enc.tokenizer.pad(seqs)
    ref = reference(base, ids, mask)
    model = enc.model
    assert len(ref) == model.config.num_hidden_layers + 1
    keep = mask[:, None, None, :] if not mask.all() else None
    x, _ = model.embeddings.forward(ids)                                    # (B, T, E)
    ours = [x]
    for layer in model.encoder.layers:
        x, _ = layer.forward(x, mask=keep)
        ours.append(x)
    last, _ = model.forward(ids, mask)
    ours.append(last)
    ref.append(ref[-1])
    for i, (a, b) in enumerate(zip(ours, ref, strict=True)):
        assert a.dtype == np.float32
        diff = float(np.abs(a - b)[mask].max())                            # real pieces only
        assert diff <= 1e-4, f"{kind}: hidden states {i}: max abs difference {diff:.2e}"
    assert float(np.abs(ref[-1][mask]).max()) > 0.5                       # not a degenerate model


def test_mean_pooled_embeddings_match_transformers(built):
    kind, _, base, enc = built
    seqs = enc.tokenizer.encode(texts())
    ids, mask = enc.tokenizer.pad(seqs)
    last = reference(base, ids, mask)[-1].astype(np.float64)              # (B, T, E)
    m = mask[..., None].astype(np.float64)
    ref = (last * m).sum(1) / m.sum(1)                                     # (B, E): mean over real pieces
    for threads in (1, 2):
        ours = enc.encode(texts(), batch_size=2, threads=threads)
        diff = float(np.abs(ours - ref).max())
        assert diff <= 1e-4, f"{kind}, {threads} threads: max abs difference {diff:.2e}"
    assert np.abs(np.linalg.norm(ref, axis=1) - 1).max() > 0.1            # no normalisation on either side


def test_the_explorers_attention_is_transformers(built):
    """The explorer on the directory: the weights the page recomputes from its stored q, k and scale are
    transformers' attention probabilities (eager attention, output_attentions)."""
    from npformer.explore.payload import decode_array, open_explorer

    kind, d, base, enc = built
    text = "A man is playing a guitar."
    payload = open_explorer(d).payload([{"text": text}])
    assert payload["model"]["kind"] == kind.split("-")[0] and payload["title"] == d.name
    (g,) = payload["inputs"][0]["groups"]
    q, k = (decode_array(g[n]).astype(np.float64) for n in ("q", "k"))    # (L, H, T, D)
    scores = q @ np.swapaxes(k, -1, -2) * g["scale"]                       # (L, H, T, T)
    w = np.exp(scores - scores.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)
    ids = enc.tokenizer.encode([text])[0]
    with torch.inference_mode():
        out = base(input_ids=torch.from_numpy(ids[None]), output_attentions=True)
    ref = np.stack([a[0].numpy() for a in out.attentions])                 # (L, H, T, T)
    assert w.shape == ref.shape and g["query_tokens"] == enc.tokenizer.tokens([text])[0]
    np.testing.assert_allclose(w, ref, rtol=0, atol=1e-5)
