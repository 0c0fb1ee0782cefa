// npformer explore: the Episode view of a policy that acts over time (explore/episode.py, a gripper run).
//
// The page's inputs are the episode's steps; this view drives them on a timeline. At the current step:
// the frame the policy saw, the gripper's path drawn over it, and the patches tinted by what the chosen
// action token read (its attention, averaged over the chosen heads of the chosen layer, or its rollout
// or relevance row); the instruction's words as a row of the same weights; each action token's choice
// with its top alternatives, and for dx and dy a bar chart over the bins. The numbers are the payload's
// (docs/EXPLORE_FORMAT.md, "Episode"): 8-bit weights as the model computed them at that step.
// Keyboard: focus the timeline, Left/Right a step, Home/End the first and last, Up/Down the action token.
"use strict";

(function () {
  const P = window.npformerPage;
  const { S, el } = P;
  const CELL_MIN = 10, CELL_MAX = 28, LEFT = 70, TOP = 26, ROW_H = 16, FRAME = 288;
  const SAY = {
    success: (c, k) => "success: the " + c + " block ended in the " + k,
    wrong_container: (c) => "failure: the " + c + " block ended in the other container",
    wrong_block: (c) => "failure: another block was picked up; the " + c + " block never was",
    dropped: (c) => "failure: the " + c + " block was grasped, then left on the table",
    held_at_end: (c) => "failure: the " + c + " block was still held at the end",
    never_grasped: () => "failure: no block was ever grasped",
  };

  function episode() { return S.payload ? S.payload.episode : null; }

  // a gripper page opens on this view (once per page; --serve's new episodes keep the view chosen)
  P.hooks.onRender.push(() => {
    if (!episode() || S.episodeShown) return;
    S.episodeShown = true;
    S.view = "episode";
    for (const b of document.querySelectorAll("#tabs button[data-view]")) b.classList.toggle("active", b.dataset.view === "episode");
    for (const v of document.querySelectorAll(".view")) v.classList.toggle("active", v.id === "view-episode");
  });

  function outcomeText(ep) {
    const [c, k] = ep.target;
    const end = ep.truncated ? "stopped at the step limit after " + ep.steps + " steps"
      : "the policy said done at step " + ep.steps;
    return "Episode " + ep.seed + ", \u201c" + ep.instruction + "\u201d" + (ep.perturb ? " (perturbed)" : "") + ": " +
      (SAY[ep.outcome] || (() => ep.outcome))(c, k) + "; " + end + ".";
  }
  // an event after step s (1-based) is first seen in frame s (0-based): the timeline marks that step
  function eventCell(ev, N) { return Math.min(ev.step, N - 1); }
  function eventText(ev) { return "after step " + ev.step + " the " + ev.colour + " block " + ev.kind; }

  function dists(ep) {
    if (!ep._dists) ep._dists = P.decodeArray(ep.dists);
    return ep._dists;
  }

  // the values the frame and the words show: one key row of the chosen action token (query row `slot`)
  function keyValues(g, slot, heads) {
    if (S.episodeSource === "rollout") return P.rolloutRow(g, slot);
    if (S.episodeSource === "relevance") return P.relevanceRow(g, slot);
    return P.meanRow(g, S.layer, slot, heads);
  }

  function go(step, slot) {
    const ep = episode();
    S.episodeSlot = Math.max(0, Math.min(ep.slots.length - 1, slot));
    S.episodeFocus = true;
    S.episodeRedraw = true;                      // the canvas is about to be replaced: its blur is no leaving
    step = Math.max(0, Math.min(ep.steps - 1, step));
    if (step !== S.input) {                      // the page's input is the step: every tab follows it
      const sel = document.getElementById("input-select");
      sel.value = step;
      sel.dispatchEvent(new Event("change"));
    } else P.render();
  }

  function draw(section) {
    const ep = episode(), N = ep.steps, inp = P.input(), g = P.group();
    const step = Math.min(S.input, N - 1);
    if (S.episodeSlot === undefined) S.episodeSlot = 0;
    const slot = S.episodeSlot;
    S.query = slot;
    S.target = slot;                              // the step's targets are its tokens, in slot order
    if (!S.episodeSource) S.episodeSource = "attention";
    const heads = [...S.heads].filter((h) => h < g.n_heads).sort((a, b) => a - b);

    section.appendChild(el("p", { id: "episode-outcome", class: "outcome", text: outcomeText(ep) }));
    if (ep.events.length) {
      section.appendChild(el("p", { id: "episode-events", class: "hint", text: "Perturbations: " +
        ep.events.map(eventText).join("; ") + " (marked \u25bc on the timeline)." }));
    }
    section.appendChild(el("p", { class: "hint", text:
      "One column per step; the first row is the gripper command chosen, the next three how sure the policy was " +
      "of each token it chose (its probability). Click a step, or focus the timeline: Left and Right move a step, " +
      "Home and End go to the first and last, Up and Down choose the action token." }));

    // -- the timeline --------------------------------------------------------------------------------
    const cw = Math.max(CELL_MIN, Math.min(CELL_MAX, Math.floor(900 / N)));
    const c = P.makeCanvas(LEFT + N * cw + 10, TOP + 4 * ROW_H + 22);
    c.id = "episode-timeline";
    const said = P.keyboardCanvas(c, "episode-said", "the episode's " + N + " steps; Left and Right choose a step, " +
                                  "Home and End the first and last, Up and Down the action token");
    const ctx = c._ctx;
    const probs = ep.tokens.map((t, i) => ep.top[i].map((top, j) => {
      const hit = top.find((x) => x[0] === t[j]);
      return hit ? hit[1] : 0;
    }));
    function paint(focused) {
      ctx.fillStyle = "#fff";
      ctx.fillRect(0, 0, c.width, c.height);
      ctx.font = "11px system-ui, sans-serif";
      const rows = ["command"].concat(ep.slots);
      rows.forEach((name, r) => {
        ctx.fillStyle = r - 1 === slot ? "#1f6fb4" : "#1d232a";
        ctx.fillText(name, 4, TOP + r * ROW_H + ROW_H - 4);
      });
      for (let i = 0; i < N; i++) {
        const x = LEFT + i * cw;
        const cmd = ep.tokens[i][2] - ep.bins;
        ctx.fillStyle = ["#cfd8dc", "#37474f", "#2a9d3f"][cmd] || "#999";
        ctx.fillRect(x, TOP + 1, cw - 1, ROW_H - 2);
        for (let j = 0; j < 3; j++) {
          const [R, G, B] = P.heat(probs[i][j]);
          ctx.fillStyle = "rgb(" + R + "," + G + "," + B + ")";
          ctx.fillRect(x, TOP + (j + 1) * ROW_H + 1, cw - 1, ROW_H - 2);
        }
        if (i % 5 === 4 || i === 0) { ctx.fillStyle = "#5f6b76"; ctx.fillText(String(i + 1), x, TOP + 4 * ROW_H + 14); }
      }
      ctx.fillStyle = "#e4572e";
      for (const ev of ep.events) {                   // the perturbations: where the block moved or slipped
        const x = LEFT + eventCell(ev, N) * cw + cw / 2;
        ctx.beginPath(); ctx.moveTo(x - 5, 4); ctx.lineTo(x + 5, 4); ctx.lineTo(x, 14); ctx.closePath(); ctx.fill();
        ctx.fillText(ev.kind, Math.min(x + 6, c.width / (window.devicePixelRatio || 1) - 40), 14);
      }
      ctx.strokeStyle = "#1d232a";
      ctx.lineWidth = 2;
      if (focused) ctx.setLineDash([4, 3]);
      ctx.strokeRect(LEFT + step * cw - 1, TOP - 1, cw + 1, 4 * ROW_H + 2);
      ctx.setLineDash([]);
      ctx.strokeStyle = "#1f6fb4";
      ctx.strokeRect(LEFT + step * cw + 1, TOP + (slot + 1) * ROW_H + 1, cw - 3, ROW_H - 2);
    }
    c.addEventListener("keydown", (ev) => {
      const k = ev.key;
      if (k === "ArrowRight" || k === "ArrowLeft") go(step + (k === "ArrowRight" ? 1 : -1), slot);
      else if (k === "Home") go(0, slot);
      else if (k === "End") go(N - 1, slot);
      else if (k === "ArrowUp" || k === "ArrowDown") go(step, slot + (k === "ArrowDown" ? 1 : -1));
      else if (k === "Escape") { S.episodeFocus = false; c.blur(); return; }
      else return;
      ev.preventDefault();
    });
    c.addEventListener("click", (ev) => {
      const r = c.getBoundingClientRect();
      const i = Math.floor((ev.clientX - r.left - LEFT) / cw), row = Math.floor((ev.clientY - r.top - TOP) / ROW_H);
      if (i >= 0 && i < N) go(i, row >= 1 && row <= 3 ? row - 1 : slot);
    });
    c.addEventListener("focus", () => paint(true));
    // leaving the timeline lets the keyboard go; the redraw after a key replaces the canvas, which is no leaving
    c.addEventListener("blur", () => { if (!S.episodeRedraw) S.episodeFocus = false; paint(false); });
    paint(false);
    const mv = ep.moves[step], cmd = ep.commands[ep.tokens[step][2] - ep.bins];
    said.textContent = "step " + (step + 1) + " of " + N + ": move " + mv[0].toFixed(3) + ", " + mv[1].toFixed(3) +
      ", " + cmd + "; " + ep.slots[slot] + " token chose " + tokenName(ep, slot, ep.tokens[step][slot]) +
      " with probability " + P.fmt(probs[step][slot]) +
      ep.events.filter((e) => eventCell(e, N) === step).map((e) => "; " + eventText(e)).join("");
    section.append(el("div", { class: "scroll" }, [c]), said);

    // -- where the action looked --------------------------------------------------------------------
    const src = el("select", { id: "episode-source" });
    P.option(src, "attention", "attention (layer " + P.layerName(g, S.layer) + ", chosen heads' mean)");
    if (g.rollout) P.option(src, "rollout", "rollout");
    if (g.relevance) P.option(src, "relevance", "relevance");
    src.value = S.episodeSource;
    src.addEventListener("change", () => { S.episodeSource = src.value; P.render(); });
    const explain = el("button", { type: "button", id: "episode-explain", text: "rollout and relevance tab" });
    explain.addEventListener("click", () => P.setView("explain"));
    section.appendChild(el("p", { class: "hint" }, ["Show ", src, " of the " + ep.slots[slot] + " token (query \u201c" +
      g.query_tokens[slot] + "\u201d): each patch of the frame is tinted by the weight its key receives, relative " +
      "to the row's largest; the words below carry the same row. The gripper's path is drawn in blue up to this " +
      "step, grey after it. ", explain]));
    const values = keyValues(g, slot, heads);
    const fc = P.makeCanvas(FRAME + 20, FRAME + 34);
    fc.id = "episode-frame";
    const fx = fc._ctx;
    fx.fillStyle = "#fff";
    fx.fillRect(0, 0, FRAME + 20, FRAME + 34);
    if (values) P.drawOverlay(fx, inp.image, g, values, 10, 24, FRAME, "step " + (step + 1) + ": what " +
                              ep.slots[slot] + " read");
    drawPath(fx, ep.path, step, 10, 24, FRAME);
    const end = P.makeCanvas(160, 150);
    end.id = "episode-end";
    const ex = end._ctx;
    ex.fillStyle = "#fff";
    ex.fillRect(0, 0, 160, 150);
    ex.fillStyle = "#1d232a";
    ex.font = "12px system-ui, sans-serif";
    ex.fillText("the end: " + ep.outcome.replace(/_/g, " "), 4, 14);
    ex.imageSmoothingEnabled = false;
    ex.drawImage(P.imageCanvas(ep.final_image), 4, 22, 112, 112);
    drawPath(ex, ep.path, N, 4, 22, 112);
    S.canvas = fc;

    // the words, as a row of the same weights
    const kinds = g.token_kinds.key;
    const wordKeys = [];
    g.key_tokens.forEach((t, j) => { if (kinds[j] === "word" || kinds[j] === "action") wordKeys.push(j); });
    const wt = el("table", { class: "num", id: "episode-words" });
    const mx = Math.max(1e-12, ...(values ? wordKeys.map((j) => values[j]) : [0]));
    const head = el("tr"), row = el("tr");
    for (const j of wordKeys) {
      head.appendChild(el("th", { class: "tok", text: P.shortToken(g.key_tokens[j], 14) }));
      const td = P.numCell("td", values ? values[j] : 0, "w");
      const [R, G, B] = P.heat(values ? values[j] / mx : 0);
      td.style.background = "rgb(" + R + "," + G + "," + B + ")";
      if (R < 128) td.style.color = "#fff";
      row.appendChild(td);
    }
    wt.append(head, row);

    // -- the action tokens ---------------------------------------------------------------------------
    const panel = el("div", { class: "panel", id: "episode-tokens" }, [el("h2", { text: "Step " + (step + 1) +
                                                                                   ": the action tokens" })]);
    const tt = el("table", { class: "num" });
    tt.appendChild(el("tr", null, [el("th", { text: "token" }), el("th", { class: "tok", text: "chosen" }),
                                   el("th", { text: "p" }), el("th", { class: "tok", text: "top 5 (p)" })]));
    ep.slots.forEach((name, j) => {
      const t = ep.tokens[step][j];
      const tr = el("tr", { "data-slot": j, class: j === slot ? "chosen" : "" },
                    [el("td", { text: name }), el("td", { class: "tok", text: tokenName(ep, j, t) })]);
      tr.appendChild(P.numCell("td", probs[step][j], "p"));
      tr.appendChild(el("td", { class: "tok", text: ep.top[step][j].map((x) => tokenName(ep, j, x[0]) + " " +
                                                                         x[1].toFixed(3)).join(" \u00b7 ") }));
      tr.addEventListener("click", () => go(step, j));
      tt.appendChild(tr);
    });
    panel.appendChild(tt);
    const D = dists(ep), B = ep.bins;
    for (let j = 0; j < 2; j++) panel.appendChild(binChart(D, step, j, B, ep));
    const knock = el("button", { type: "button", id: "episode-knockout", text: "knock-outs for this token" });
    knock.disabled = !inp.knockout;
    knock.addEventListener("click", () => P.setView("knockout"));
    panel.appendChild(el("p", { class: "hint" }, [knock, inp.knockout ? " every head knocked out in turn at this step"
      : " not computed for this step: the knock-outs' work budget covered steps 1 to " + ep.knockout_steps]));

    section.appendChild(el("div", { class: "row" }, [fc, el("div", null, [end, wt]), panel]));
    S.episodeRedraw = false;
    if (S.episodeFocus) c.focus();
    const patches = [];
    if (values) {
      const off = inp.image.patch_token_offset, n = inp.image.grid[0] * inp.image.grid[1];
      for (let p = 0; p < n; p++) patches.push(values[off + p]);
    }
    return { view: "episode", step: step, slot: slot, token: ep.slots[slot], source: S.episodeSource,
             layer: P.layerName(g, S.layer), heads: heads, outcome: ep.outcome, events: ep.events,
             chosen: ep.tokens[step], top: ep.top[step], patches: patches,
             words: wordKeys.map((j) => [g.key_tokens[j], values ? values[j] : null]) };
  }

  function tokenName(ep, slot, t) { return slot === 2 ? ep.commands[t - ep.bins] : "bin " + t; }

  // the gripper's path over a frame drawn at (x, y), size px: blue up to step `upto`, grey after
  function drawPath(ctx, path, upto, x, y, size) {
    const at = (p) => [x + p[0] * size, y + p[1] * size];
    ctx.lineWidth = 1.5;
    for (const [from, to, colour] of [[upto, path.length - 1, "rgba(90,90,90,0.55)"], [0, upto, "#1f6fb4"]]) {
      if (to <= from) continue;
      ctx.strokeStyle = colour;
      ctx.beginPath();
      const p0 = at(path[from]);
      ctx.moveTo(p0[0], p0[1]);
      for (let i = from + 1; i <= to; i++) { const p = at(path[i]); ctx.lineTo(p[0], p[1]); }
      ctx.stroke();
    }
    const [cx, cy] = at(path[Math.min(upto, path.length - 1)]);
    ctx.strokeStyle = "#1f6fb4";
    ctx.lineWidth = 2;
    ctx.beginPath();
    ctx.arc(cx, cy, 5, 0, 2 * Math.PI);
    ctx.stroke();
  }

  // one move token's distribution over the bins as bars, the chosen bin in orange
  function binChart(D, step, j, B, ep) {
    const W = 260, H = 70;
    const c = P.makeCanvas(W, H + 18);
    c.id = "episode-bars-" + ep.slots[j];
    const ctx = c._ctx;
    ctx.fillStyle = "#fff";
    ctx.fillRect(0, 0, W, H + 18);
    const off = (step * 2 + j) * B;
    let mx = 1e-12;
    for (let b = 0; b < B; b++) mx = Math.max(mx, D.data[off + b]);
    const bw = (W - 10) / B, chosen = ep.tokens[step][j];
    for (let b = 0; b < B; b++) {
      const h = (H - 14) * D.data[off + b] / mx;
      ctx.fillStyle = b === chosen ? "#e4572e" : "#1f6fb4";
      ctx.fillRect(5 + b * bw, H - h, Math.max(1, bw - (bw > 3 ? 1 : 0)), h);
    }
    ctx.fillStyle = "#1d232a";
    ctx.font = "11px system-ui, sans-serif";
    ctx.fillText(ep.slots[j] + " over " + B + " bins (largest p " + mx.toFixed(3) + ")", 5, 11);
    ctx.fillText("bin 0", 5, H + 13);
    ctx.fillText("bin " + (B - 1), W - 45, H + 13);
    return c;
  }

  P.addView("episode", "Episode", draw, () => !!episode());
})();
