// npformer explore: words instead of word pieces, and padding hidden (issue 25). Inlined after explore.js
// (render.py's _SCRIPTS); it plugs into explore.js's hooks (window.npformerPage.hooks.viewGroup).
//
// Both are a group whose query rows and key columns are gathered into units: query unit a is a set of
// query rows, key unit b a set of key columns, and
//     M[a][b] = mean over the rows i of a of ( sum over the columns j of b of W[i][j] ),
// so a unit's row still sums to 1 when every row of W does. The head, model, matrix and statistics views
// then read M instead of W (explore.js viewGroup).
//   - Words (GROUP.word_index, from '##' continuation pieces): a word's key pieces are summed and its query
//     pieces averaged.
//   - Padding (token kind "pad", e.g. the tabletop policy's empty instruction slots) is hidden by default:
//     its query rows are left out, and its key columns too when the mask lets no query read them (their
//     weights are then all 0, so no row loses weight). "show padding" puts them back.
"use strict";

(function () {
  const P = window.npformerPage;
  const S = P.S;
  S.words = false;
  S.showPadding = false;

  function hasWords(g) { return !!(g.word_index && g.word_labels); }
  function hasPadding(g) { return !!(g.token_kinds && g.token_kinds.query && g.token_kinds.query.includes("pad")); }

  // Which unit each query row and key column joins (-1: left out), with the units' labels, kinds and
  // positions (the statistics' distance |i - j| is measured in these positions).
  function unitsOf(g) {
    const Tq = g.query_tokens.length, Tk = g.key_tokens.length;
    const kinds = g.token_kinds || { query: [], key: [] };
    const words = S.words && hasWords(g);
    const qUnit = Int32Array.from({ length: Tq }, (_, i) => (words ? g.word_index.query[i] : i));
    const kUnit = Int32Array.from({ length: Tk }, (_, j) => (words ? g.word_index.key[j] : j));
    if (!S.showPadding && hasPadding(g)) {
      const mask = P.arr(g, "mask");
      for (let i = 0; i < Tq; i++) if (kinds.query[i] === "pad") qUnit[i] = -1;
      for (let j = 0; j < Tk; j++) {
        if (kinds.key[j] !== "pad" || !mask) continue;
        let readable = false;
        for (let i = 0; i < Tq && !readable; i++) readable = mask.data[i * Tk + j] !== 0;
        if (!readable) kUnit[j] = -1;
      }
    }
    // number the units that remain 0, 1, ... in order; label each by its text (a word's pieces joined)
    function renumber(unit, tokens, labels, kindsOf) {
      const out = Int32Array.from(unit), map = new Map(), lab = [], kin = [], pos = [];
      unit.forEach((u, t) => {
        if (u < 0) return;
        if (!map.has(u)) {
          map.set(u, lab.length);
          lab.push(words ? labels[u] : tokens[t]);
          kin.push(kindsOf[t]);
          pos.push(words ? u : t);
        }
        out[t] = map.get(u);
      });
      return { unit: out, labels: lab, kinds: kin, pos: pos };
    }
    const q = renumber(qUnit, g.query_tokens, words ? g.word_labels.query : null, kinds.query);
    const k = renumber(kUnit, g.key_tokens, words ? g.word_labels.key : null, kinds.key);
    const same = !words && q.labels.length === Tq && k.labels.length === Tk;
    return same ? null : { q: q, k: k };
  }

  // M (nq, nk) from W (Tq, Tk): sum over a unit's columns, mean over its rows.
  function merge(W, u, Tq, Tk) {
    const nq = u.q.labels.length, nk = u.k.labels.length;
    const count = new Float64Array(nq);
    for (let i = 0; i < Tq; i++) if (u.q.unit[i] >= 0) count[u.q.unit[i]] += 1;
    const M = new Float64Array(nq * nk);
    for (let i = 0; i < Tq; i++) {
      const a = u.q.unit[i];
      if (a < 0) continue;
      for (let j = 0; j < Tk; j++) {
        const b = u.k.unit[j];
        if (b >= 0) M[a * nk + b] += W[i * Tk + j] / count[a];
      }
    }
    return Float32Array.from(M);
  }

  // Per head, as payload.py head_stats computes them: mean over the rows of the row entropy (nats), of the
  // distance sum_j w_ij |pos_i - pos_j| and of the weight on the first key unit.
  function statsOf(d) {
    const nq = d.query_tokens.length, nk = d.key_tokens.length;
    const out = { entropy: [], distance: [], first: [] };
    for (let l = 0; l < d.n_layers; l++) {
      const e = [], dist = [], first = [];
      for (let h = 0; h < d.n_heads; h++) {
        const M = P.headWeights(d, l, h);
        let se = 0, sd = 0, sf = 0;
        for (let a = 0; a < nq; a++) {
          for (let b = 0; b < nk; b++) {
            const w = M[a * nk + b];
            if (w > 0) se -= w * Math.log(w);
            sd += w * Math.abs(d._qpos[a] - d._kpos[b]);
          }
          sf += M[a * nk];
        }
        e.push(se / nq); dist.push(sd / nq); first.push(sf / nq);
      }
      out.entropy.push(e); out.distance.push(dist); out.first.push(first);
    }
    return out;
  }

  // The group as the head, model, matrix and statistics views read it (cached per group and setting).
  function viewGroup(g) {
    const key = (S.words ? "w" : "p") + (S.showPadding ? "+pad" : "");
    if (!g._views) g._views = {};
    if (key in g._views) return g._views[key] || g;
    const u = unitsOf(g);
    if (!u) { g._views[key] = null; return g; }
    const Tq = g.query_tokens.length, Tk = g.key_tokens.length;
    const d = {
      name: g.name, n_layers: g.n_layers, n_heads: g.n_heads, head_dim: g.head_dim, layers: g.layers,
      query_tokens: u.q.labels, key_tokens: u.k.labels, token_kinds: { query: u.q.kinds, key: u.k.kinds },
      mask: null, bias: null, _qpos: u.q.pos, _kpos: u.k.pos, units: u,
      derived: (l, h) => merge(P.headWeights(g, l, h), u, Tq, Tk),
    };
    let stats = null;
    Object.defineProperty(d, "stats", { get: () => stats || (stats = statsOf(d)) });
    g._views[key] = d;
    return d;
  }
  P.hooks.viewGroup = viewGroup;

  // the toggles: shown only where they apply; a change clears the selection (its indices were the old units')
  function sync() {
    const g = P.group();
    $("words-toggle").hidden = !hasWords(g);
    $("padding-toggle").hidden = !hasPadding(g);
    $("words").checked = S.words;
    $("show-padding").checked = S.showPadding;
    const n = viewGroup(g).query_tokens.length;            // selected rows are the shown group's
    S.selected = new Set([...S.selected].filter((i) => i < n));
  }
  function $(id) { return document.getElementById(id); }
  P.hooks.onRender.push(sync);
  function changed() {
    S.words = $("words").checked;
    S.showPadding = $("show-padding").checked;
    S.selected = new Set();
    S.hover = null;
    S.kindFilter = null;
    P.render();
  }
  $("words").addEventListener("change", changed);
  $("show-padding").addEventListener("change", changed);

  window.npformerUnits = { viewGroup: viewGroup, merge: merge, unitsOf: unitsOf };
})();
