// npformer explore: who reads whom (issue 25). Attention summed into blocks by token kind (action tokens,
// words, patches, special tokens), per layer and head and as rollout. Inlined after explore.js (render.py's
// _SCRIPTS); it adds its view with window.npformerPage.addView.
//
// For one (Tq, Tk) map W, a query kind a and a key kind b:
//     B[a][b] = mean over the query rows i of kind a of ( sum over the keys j of kind b of W[i][j] / s_i ),
//     s_i = the sum of row i over every key that is not padding.
// Padding is left out on both sides: its query rows are not averaged and its keys get no column. s_i is 1
// whenever the mask forbids the padding keys (as in npformer's models) and makes each query kind's row of
// blocks sum to 1 otherwise too; a row that reads nothing but padding is left out.
"use strict";

(function () {
  const P = window.npformerPage;
  const S = P.S;
  const el = P.el;
  S.blocksSource = "input";          // "input": this input's attention; "training": the probe at the slider's step

  // the kinds in order of first appearance, padding left out
  function kindOrder(kinds) {
    const out = [];
    for (const k of kinds) if (k !== "pad" && !out.includes(k)) out.push(k);
    return out;
  }

  // B (nq x nk, row-major) of one (Tq, Tk) map `W`, read at `off`
  function blocksOf(W, off, Tq, Tk, qIdx, kIdx, nq, nk) {
    const B = new Float64Array(nq * nk), rows = new Float64Array(nq), row = new Float64Array(nk);
    for (let i = 0; i < Tq; i++) {
      const a = qIdx[i];
      if (a < 0) continue;
      row.fill(0);
      let s = 0;
      for (let j = 0; j < Tk; j++) {
        const b = kIdx[j];
        if (b < 0) continue;
        const w = W[off + i * Tk + j];
        row[b] += w;
        s += w;
      }
      if (!(s > 0)) continue;
      rows[a] += 1;
      for (let b = 0; b < nk; b++) B[a * nk + b] += row[b] / s;
    }
    for (let a = 0; a < nq; a++) for (let b = 0; b < nk; b++) if (rows[a]) B[a * nk + b] /= rows[a];
    return { B: B, rows: rows };
  }

  // Rollout (Abnar & Zuidema 2020, residual as 0.5 I, as relevance.py rollout) of the probe's maps at one
  // step; W (S, L, H, T, T) -> L maps (T, T).
  function probeRollout(W, s) {
    const [, L, H, T] = W.shape;
    let r = new Float64Array(T * T);
    for (let i = 0; i < T; i++) r[i * T + i] = 1;
    const out = [];
    for (let l = 0; l < L; l++) {
      const a = new Float64Array(T * T);
      for (let h = 0; h < H; h++) {
        const off = ((s * L + l) * H + h) * T * T;
        for (let n = 0; n < T * T; n++) a[n] += 0.5 * W.data[off + n] / H;
      }
      for (let i = 0; i < T; i++) {
        a[i * T + i] += 0.5;
        let sum = 0;
        for (let j = 0; j < T; j++) sum += a[i * T + j];
        for (let j = 0; j < T; j++) a[i * T + j] /= sum;
      }
      const next = new Float64Array(T * T);
      for (let i = 0; i < T; i++) for (let k = 0; k < T; k++) {
        const x = a[i * T + k];
        if (x) for (let j = 0; j < T; j++) next[i * T + j] += x * r[k * T + j];
      }
      r = next;
      out.push(r);
    }
    return out;
  }

  function probe() {
    const tr = S.payload.training;
    return tr && tr.token_kinds ? tr : null;
  }

  // What the view sums: {name, L, H, Tq, Tk, qKinds, kKinds, names (layer numbers), map(l, h), rollout(l) | null}
  function source() {
    const tr = probe();
    if (S.blocksSource === "training" && tr) {
      const W = tr._W || (tr._W = P.decodeArray(tr.weights));
      const [Sn, L, H, Tq, Tk] = W.shape;
      const s = S.trainStep = Math.max(0, Math.min(S.trainStep, Sn - 1));
      const selfAttn = Tq === Tk && !/cross/.test(tr.group);
      let roll = null;
      return {
        name: tr.group + " of the training probe at step " + tr.steps[s], L: L, H: H, Tq: Tq, Tk: Tk,
        qKinds: tr.token_kinds.query, kKinds: tr.token_kinds.key, names: tr.layers,
        map: (l, h) => [W.data, ((s * L + l) * H + h) * Tq * Tk],
        rollout: selfAttn ? (l) => [(roll || (roll = probeRollout(W, s)))[l], 0] : null,
      };
    }
    const g = P.group();
    const R = g.rollout ? P.arr(g, "rollout") : null;
    const Tq = g.query_tokens.length, Tk = g.key_tokens.length;
    return {
      name: g.name + " of this input", L: g.n_layers, H: g.n_heads, Tq: Tq, Tk: Tk,
      qKinds: g.token_kinds.query, kKinds: g.token_kinds.key, names: g.layers,
      map: (l, h) => [P.headWeights(g, l, h), 0],
      rollout: R ? (l) => [R.data, l * Tq * Tk] : null,
    };
  }

  function mixed(qKinds, kKinds) { return kindOrder(qKinds).length > 1 || kindOrder(kKinds).length > 1; }
  function available() {
    const g = P.group(), tr = probe();
    return !!(g.token_kinds && mixed(g.token_kinds.query, g.token_kinds.key)) ||
      !!(tr && mixed(tr.token_kinds.query, tr.token_kinds.key));
  }

  // Open the head view on layer l (head h, or every head for rollout) showing only these kinds.
  function openBlock(l, h, qKind, kKind) {
    S.kindFilter = { query: qKind, key: kKind };
    if (h === null) {
      S.layer = l;
      S.headsAuto = false;
      S.heads = new Set(Array.from({ length: P.group().n_heads }, (_, n) => n));
      P.syncHeadBoxes();
      P.setView("head");
    } else P.openHead(l, h, "head");
  }

  function blocksView(section) {
    const tr = probe();
    if (S.blocksSource === "training" && !tr) S.blocksSource = "input";
    if (S.blocksSource === "input" && !mixed(P.group().token_kinds.query, P.group().token_kinds.key)) {
      S.blocksSource = "training";
    }
    const src = source();
    const qOrder = kindOrder(src.qKinds), kOrder = kindOrder(src.kKinds);
    const qIdx = src.qKinds.map((k) => qOrder.indexOf(k)), kIdx = src.kKinds.map((k) => kOrder.indexOf(k));
    const nq = qOrder.length, nk = kOrder.length;
    const L = src.L, H = src.H;
    const name = (l) => (src.names ? src.names[l] : l);
    const blocks = (pair) => blocksOf(pair[0], pair[1], src.Tq, src.Tk, qIdx, kIdx, nq, nk).B;
    const heads = [], roll = [];
    for (let l = 0; l < L; l++) {
      heads.push(Array.from({ length: H }, (_, h) => blocks(src.map(l, h))));
      roll.push(src.rollout ? blocks(src.rollout(l)) : null);
    }
    const layer = Math.min(S.layer, L - 1), head = Math.min(S.focusHead, H - 1);

    // the controls: which attention, and the training step (the "Over training" slider's own step)
    const controls = el("p", { class: "hint", id: "blocks-controls" });
    if (tr) {
      const pick = el("select", { id: "blocks-source" });
      P.option(pick, "input", "this input's attention");
      P.option(pick, "training", "the training probe's " + tr.group + " attention");
      pick.value = S.blocksSource;
      pick.addEventListener("change", () => { S.blocksSource = pick.value; P.render(); });
      controls.append("Sum ", pick, " ");
      if (S.blocksSource === "training") {
        const slider = el("input", { type: "range", id: "blocks-step", min: 0, max: tr.steps.length - 1, step: 1,
                                     "aria-label": "training step" });
        slider.value = S.trainStep;
        slider.addEventListener("change", () => { S.trainStep = +slider.value; P.render(); });
        controls.append(" at ", slider, " step " + tr.steps[S.trainStep] + " (the Over training slider's step) ");
      }
    }
    section.appendChild(el("p", { class: "hint", text:
      "Who reads whom in the " + src.name + ": each square is a query kind (row) by key kind (column) block, the " +
      "attention a query token of that kind gives to all key tokens of that kind, averaged over the query tokens " +
      "of the kind, so each row sums to 1. Padding is left out. One grid per layer (rows) and head (columns), and " +
      "rollout through the layer in the last column. Click a block (or a number in the tables) to open that head " +
      "in the head view, showing only those kinds. Rows: " + qOrder.join(", ") + "; columns: " + kOrder.join(", ") + "." }));
    section.appendChild(controls);

    // the grid
    const bs = Math.max(10, Math.min(28, Math.floor(110 / Math.max(nq, nk))));
    const cellW = nk * bs, cellH = nq * bs, pad = 12, left = 96, top = 36;
    const cols = H + (src.rollout ? 1 : 0);
    const width = left + cols * (cellW + pad), height = top + L * (cellH + pad);
    const c = P.makeCanvas(width, height);
    c.id = "blocks-canvas";
    const ctx = c._ctx;
    ctx.fillStyle = "#fff";
    ctx.fillRect(0, 0, width, height);
    ctx.font = "12px system-ui, sans-serif";
    ctx.textBaseline = "middle";
    for (let col = 0; col < cols; col++) {
      const x = left + col * (cellW + pad);
      ctx.fillStyle = "#5f6b76";
      ctx.textAlign = "left";
      ctx.fillText(col < H ? "H" + col : "rollout", x, 10);
      ctx.font = "10px system-ui, sans-serif";
      ctx.textAlign = "center";
      kOrder.forEach((k, b) => ctx.fillText(k.slice(0, 4), x + b * bs + bs / 2, 26));
      ctx.font = "12px system-ui, sans-serif";
    }
    for (let l = 0; l < L; l++) {
      const y = top + l * (cellH + pad);
      ctx.fillStyle = "#5f6b76";
      ctx.textAlign = "left";
      ctx.fillText("L" + name(l), 4, y + cellH / 2);
      ctx.textAlign = "right";
      ctx.font = "10px system-ui, sans-serif";
      qOrder.forEach((k, a) => ctx.fillText(k, left - 6, y + a * bs + bs / 2));
      ctx.font = "12px system-ui, sans-serif";
      for (let col = 0; col < cols; col++) {
        const B = col < H ? heads[l][col] : roll[l];
        const x = left + col * (cellW + pad);
        for (let a = 0; a < nq; a++) for (let b = 0; b < nk; b++) {
          const v = B[a * nk + b];
          const [r, g, bl] = P.heat(v);
          ctx.fillStyle = "rgb(" + r + "," + g + "," + bl + ")";
          ctx.fillRect(x + b * bs, y + a * bs, bs - 1, bs - 1);
          if (bs >= 24) {
            ctx.fillStyle = v > 0.55 ? "#fff" : "#1d232a";
            ctx.textAlign = "center";
            ctx.font = "9px system-ui, sans-serif";
            ctx.fillText(v.toFixed(2).replace(/^0/, ""), x + b * bs + bs / 2, y + a * bs + bs / 2);
            ctx.font = "12px system-ui, sans-serif";
          }
        }
        if (l === layer && col === head) {
          ctx.strokeStyle = P.headColour(head);
          ctx.lineWidth = 2;
          ctx.strokeRect(x - 2, y - 2, cellW + 3, cellH + 3);
        }
      }
    }
    ctx.textAlign = "left";
    ctx.textBaseline = "alphabetic";
    c.addEventListener("click", (ev) => {
      const r = c.getBoundingClientRect();
      const x = ev.clientX - r.left - left, y = ev.clientY - r.top - top;
      const col = Math.floor(x / (cellW + pad)), l = Math.floor(y / (cellH + pad));
      const b = Math.floor((x - col * (cellW + pad)) / bs), a = Math.floor((y - l * (cellH + pad)) / bs);
      if (col < 0 || col >= cols || l < 0 || l >= L || a < 0 || a >= nq || b < 0 || b >= nk) return;
      openBlock(l, col < H ? col : null, qOrder[a], kOrder[b]);
    });
    section.appendChild(el("div", { class: "scroll" }, [c]));
    S.canvas = c;

    // the chosen layer's numbers: one head (its own picker) and rollout
    const pickHead = el("select", { id: "blocks-head" });
    for (let h = 0; h < H; h++) P.option(pickHead, h, "head " + h);
    pickHead.value = head;
    pickHead.addEventListener("change", () => { S.focusHead = +pickHead.value; P.render(); });
    const tables = el("div", { class: "row" });
    tables.appendChild(table("blocks-table", ["Layer " + name(layer) + ", ", pickHead], heads[layer][head], layer, head));
    if (roll[layer]) tables.appendChild(table("blocks-rollout", ["Rollout through layer " + name(layer)], roll[layer], layer, null));
    section.appendChild(tables);

    function table(id, title, B, l, h) {
      const box = el("div", { class: "panel" }, [el("h2", null, title)]);
      const t = el("table", { class: "num blocks", id: id });
      t.appendChild(el("tr", null, [el("th", { class: "tok", text: "query \u2193 key \u2192" }),
        ...kOrder.map((k) => el("th", { text: k })), el("th", { text: "sum" })]));
      qOrder.forEach((qk, a) => {
        const tr = el("tr", { "data-kind": qk }, [el("th", { class: "tok", text: qk })]);
        let sum = 0;
        kOrder.forEach((kk, b) => {
          const v = B[a * nk + b];
          sum += v;
          const td = P.numCell("td", v, "value");
          td.dataset.query = qk;
          td.dataset.key = kk;
          td.tabIndex = 0;
          td.title = "open the head view with " + qk + " queries and " + kk + " keys only";
          td.style.cursor = "pointer";
          const open = () => openBlock(l, h, qk, kk);
          td.addEventListener("click", open);
          td.addEventListener("keydown", (ev) => { if (ev.key === "Enter" || ev.key === " ") { ev.preventDefault(); open(); } });
          tr.appendChild(td);
        });
        tr.appendChild(P.numCell("td", sum, "sum"));
        t.appendChild(tr);
      });
      box.appendChild(t);
      return box;
    }

    const grid = (B) => Array.from({ length: nq }, (_, a) => Array.from(B.subarray(a * nk, (a + 1) * nk)));
    return () => ({ view: "blocks", source: S.blocksSource, name: src.name, query_kinds: qOrder, key_kinds: kOrder,
                    layers: Array.from({ length: L }, (_, l) => name(l)),
                    step: S.blocksSource === "training" ? tr.steps[S.trainStep] : null,
                    heads: heads.map((row) => row.map(grid)), rollout: src.rollout ? roll.map(grid) : null });
  }

  P.addView("blocks", "Who reads whom", blocksView, available);
  window.npformerBlocks = { blocksOf: blocksOf, kindOrder: kindOrder };
})();
