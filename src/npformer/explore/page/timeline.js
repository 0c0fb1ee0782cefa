// npformer explore: the timeline view of a causal LM's generation (explore/causal.py).
//
// One row per generation step: the step that wrote token j is the query at position P - 1 + j (P prompt
// tokens), and its row is what that step attended to: the prompt and the tokens generated before it.
// The weights are the attention group's own (npformerPage.headWeights: recomputed from q and k in
// float64, as every other view), averaged over the chosen heads of the chosen layer.
// Keyboard: focus the grid, Up/Down choose the step, Left/Right the key, Escape leaves.
"use strict";

(function () {
  const P = window.npformerPage;
  const { S, el } = P;
  const CELL_MIN = 8, CELL_MAX = 28, ROW_H = 22, LEFT = 150, TOP = 78;

  function timeline() { return P.input().timeline; }
  function timelineGroup() {
    const tl = timeline();
    return P.input().groups.find((g) => g.name === tl.group);
  }

  // The chosen heads' mean weights of the query at position `query`, keys 0..Tk-1 (Float64Array).
  function stepRow(g, query, heads) {
    const Tk = g.key_tokens.length;
    const row = new Float64Array(Tk);
    for (const h of heads) {
      const W = P.headWeights(g, S.layer, h);
      for (let j = 0; j < Tk; j++) row[j] += W[query * Tk + j] / heads.length;
    }
    return row;
  }

  function draw(section) {
    const tl = timeline(), g = timelineGroup();
    const steps = tl.steps, N = steps.length, Tk = g.key_tokens.length, np = tl.prompt_tokens;
    const heads = [...S.heads].filter((h) => h < g.n_heads).sort((a, b) => a - b);
    if (!S.timeline || S.timeline.step >= N) S.timeline = { step: 0, key: steps[0].query };
    const at = S.timeline;
    section.appendChild(el("p", { class: "hint", text:
      "Generation, one row per step: the step that wrote each token (left) attended to the prompt and the tokens " +
      "written before it (columns; the line marks where the prompt ends). Layer " + S.layer + ", the mean of " +
      (heads.length === g.n_heads ? "all heads" : "heads " + heads.join(", ")) + "; each row shaded by its own " +
      "largest weight. Click a cell, or focus the grid and use the arrow keys." }));
    if (!heads.length) {
      section.appendChild(el("p", { class: "hint", id: "timeline-empty", text: "Choose at least one head." }));
      return null;
    }
    const rows = steps.map((s) => stepRow(g, s.query, heads));
    const cw = Math.max(CELL_MIN, Math.min(CELL_MAX, Math.floor(900 / Tk)));
    const c = P.makeCanvas(LEFT + Tk * cw + 10, TOP + N * ROW_H + 6);
    c.id = "timeline-canvas";
    const said = P.keyboardCanvas(c, "timeline-said", N + " generation steps by " + Tk + " tokens read; " +
                                  "Up and Down choose a step, Left and Right a token");
    const ctx = c._ctx;
    const detail = el("div", { id: "timeline-detail" });

    function paint(focused) {
      ctx.fillStyle = "#fff";
      ctx.fillRect(0, 0, c.width, c.height);
      ctx.font = "12px system-ui, sans-serif";
      for (let j = 0; j < Tk; j++) {                              // key labels, turned
        ctx.save();
        ctx.translate(LEFT + j * cw + cw / 2 + 4, TOP - 6);
        ctx.rotate(-Math.PI / 3);
        ctx.fillStyle = j < np ? "#5f6b76" : "#1f6fb4";
        ctx.fillText(P.shortToken(g.key_tokens[j], 10), 0, 0);
        ctx.restore();
      }
      steps.forEach((s, i) => {
        const y = TOP + i * ROW_H;
        ctx.fillStyle = "#1d232a";
        ctx.fillText((i + 1) + ": " + P.shortToken(s.token, 16), 4, y + ROW_H / 2 + 4);
        let mx = 1e-12;
        for (let j = 0; j <= s.query; j++) mx = Math.max(mx, rows[i][j]);
        for (let j = 0; j < Tk; j++) {
          if (j > s.query) { ctx.fillStyle = "#f0f2f4"; }          // not yet written at this step
          else { const [R, G, B] = P.heat(rows[i][j] / mx); ctx.fillStyle = "rgb(" + R + "," + G + "," + B + ")"; }
          ctx.fillRect(LEFT + j * cw, y + 1, cw - 1, ROW_H - 2);
        }
      });
      ctx.strokeStyle = "#e4572e";                                 // where the prompt ends
      ctx.lineWidth = 2;
      ctx.beginPath();
      ctx.moveTo(LEFT + np * cw - 0.5, TOP - 4);
      ctx.lineTo(LEFT + np * cw - 0.5, TOP + N * ROW_H + 2);
      ctx.stroke();
      ctx.strokeStyle = "#1d232a";                                 // the chosen cell
      ctx.lineWidth = 2;
      if (focused) ctx.setLineDash([4, 3]);
      ctx.strokeRect(LEFT + at.key * cw - 1, TOP + at.step * ROW_H, cw + 1, ROW_H);
      ctx.setLineDash([]);
    }

    function describe() {
      const s = steps[at.step], w = rows[at.step][at.key];
      said.textContent = "step " + (at.step + 1) + " wrote \u201c" + s.token + "\u201d; token " + at.key + " \u201c" +
        g.key_tokens[at.key] + "\u201d (" + (at.key < np ? "prompt" : "generated") + "): weight " + P.fmt(w);
      detail.textContent = "";
      detail.appendChild(el("h2", { text: "Step " + (at.step + 1) + ": the most attended tokens" }));
      const order = [...Array(s.query + 1).keys()].sort((a, b) => rows[at.step][b] - rows[at.step][a]).slice(0, 5);
      const t = el("table", { class: "num", id: "timeline-top" });
      t.appendChild(el("tr", null, [el("th", { text: "position" }), el("th", { class: "tok", text: "token" }),
                                    el("th", { text: "weight" })]));
      for (const j of order) {
        const tr = el("tr", { "data-key": j }, [el("td", { text: String(j) }),
                                                el("td", { class: "tok", text: P.tokenText(g.key_tokens[j]) })]);
        tr.appendChild(P.numCell("td", rows[at.step][j], "w"));
        t.appendChild(tr);
      }
      detail.appendChild(t);
    }

    function move(step, key) {
      at.step = Math.max(0, Math.min(N - 1, step));
      at.key = Math.max(0, Math.min(steps[at.step].query, key));
      paint(document.activeElement === c);
      describe();
    }

    c.addEventListener("keydown", (ev) => {
      if (ev.key === "ArrowUp" || ev.key === "ArrowDown") move(at.step + (ev.key === "ArrowDown" ? 1 : -1), at.key);
      else if (ev.key === "ArrowLeft" || ev.key === "ArrowRight") move(at.step, at.key + (ev.key === "ArrowRight" ? 1 : -1));
      else if (ev.key === "Escape") { c.blur(); return; }
      else return;
      ev.preventDefault();
    });
    c.addEventListener("click", (ev) => {
      const r = c.getBoundingClientRect();
      const i = Math.floor((ev.clientY - r.top - TOP) / ROW_H), j = Math.floor((ev.clientX - r.left - LEFT) / cw);
      if (i >= 0 && i < N && j >= 0 && j < Tk) move(i, j);
    });
    c.addEventListener("focus", () => paint(true));
    c.addEventListener("blur", () => paint(false));
    paint(false);
    describe();
    section.append(el("div", { class: "scroll" }, [c]), said, detail);
    S.canvas = c;
    return () => ({ view: "timeline", group: g.name, layer: S.layer, heads: heads, prompt_tokens: np,
                    key_tokens: g.key_tokens,
                    steps: steps.map((s, i) => ({ token: s.token, id: s.id, query: s.query,
                                                  weights: Array.from(rows[i].subarray(0, s.query + 1)) })) });
  }

  P.addView("timeline", "timeline", draw, () => !!(P.input().timeline && timelineGroup()));
})();
