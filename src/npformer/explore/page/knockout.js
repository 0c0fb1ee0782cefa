// npformer explore: the knock-out view (issue 25), "does this head matter?".
//
// For the chosen target, each head of the attention group is ranked two ways, side by side:
//   by attention   its weight, in the target's query row, on the input positions most relevant to the
//                  target (gradient-weighted relevance; payload knockout.top_keys of them);
//   by knock-out   how much the target lost when that head's slice of the merged heads was zeroed and
//                  the model run again (payload knockout.groups[group].effect: the drop in the target's
//                  log-odds log(p / (1 - p)), or 1 - cosine for MiniLM's embedding).
// The Spearman correlation of the two rankings (computed when the page was written, ties by average rank)
// and a sentence chosen from the numbers say whether attention predicted importance here. A line joins
// each head's two places. Click a head (a row, or a line's end) to open it in the head view; on the
// canvas, the arrow keys choose a head and Enter opens it. Heads past the knock-outs' work budget (payload
// knockout.skipped, their numbers NaN) are left out of both rankings, and the note says which and why. The numbers come from the payload
// (docs/EXPLORE_FORMAT.md, "Knock-outs"); this file only ranks and draws them.
"use strict";

(function () {
  const P = window.npformerPage;
  const el = P.el;

  function knockout() {
    const k = P.input().knockout;
    return k && k.groups && k.groups[P.group().name] ? k : null;
  }

  // 1-based ranks from the largest value, ties sharing the mean of the ranks they span
  function ranksFromTop(values) {
    const order = values.map((v, i) => i).sort((a, b) => values[b] - values[a] || a - b);
    const ranks = new Array(values.length);
    for (let s = 0; s < order.length;) {
      let e = s + 1;
      while (e < order.length && values[order[e]] === values[order[s]]) e++;
      for (let n = s; n < e; n++) ranks[order[n]] = (s + e + 1) / 2;
      s = e;
    }
    return ranks;
  }

  // Spearman's exact two-sided 5% critical values for n = 5..10 items without ties, as the largest sum of
  // squared rank differences, S = sum d^2, that is significant: rho = 1 - 6 S / (n^3 - n) >= the critical
  // value exactly when P(|rho| >= it) <= 5% over the n! equally likely rankings (Zar 1972 tabulates the
  // same values; tests/explore/test_page_knockout.py enumerates the permutations). n <= 4: none, since even
  // rho = +-1 comes 2 times in n! >= 2 in 24.
  const EXACT_MAX_S = { 5: 0, 6: 4, 7: 12, 8: 22, 9: 36, 10: 58 };

  // The two-sided 5% level of Spearman's rho for n items: {level, exact}, or null when n <= 4 (no result can
  // reach it). Past 10 items the normal approximation 1.96 / sqrt(n - 1), below 1 from there on.
  function chanceLevel(n) {
    if (n <= 4) return null;
    if (n in EXACT_MAX_S) return { level: 1 - 6 * EXACT_MAX_S[n] / (n * n * n - n), exact: true };
    return { level: 1.96 / Math.sqrt(n - 1), exact: false };
  }
  P.spearmanLevel = chanceLevel;

  function factorial(n) { let f = 1; for (let m = 2; m <= n; m++) f *= m; return f; }

  function decisionName(id) {
    const labels = P.input().knockout.labels;
    return labels && labels[id] !== undefined ? "\u201c" + labels[id] + "\u201d" : String(id);
  }

  // open a head in the head view; a --layers page holds only some layers' maps (GROUP.layers: their real
  // numbers), while the knock-outs cover every layer
  function openHead(r, said) {
    const g = P.group();
    const at = g.layers ? g.layers.indexOf(r.l) : r.l;
    if (at < 0) { said.textContent = "layer " + r.l + "'s maps are not in this page (it was written with --layers)"; return; }
    P.openHead(at, r.h, "head");
  }

  function headName(r) { return "L" + r.l + "\u00b7H" + r.h; }

  // The sentence: every word chosen from the numbers it describes. ``floor``: the target's noise floor (the
  // float32 forward's gap from the float64 one), below which an effect is rounding.
  function verdict(rows, rho, measure, floor) {
    const n = rows.length;
    const largest = Math.max(...rows.map((x) => Math.abs(x.effect)));
    if (Number.isFinite(floor) && largest < floor) {
      return "The knock-out effects are too small to rank: the largest, " + P.fmt(largest) + (measure === "cosine" ?
        "" : " nats") + ", is below the noise floor of " + P.fmt(floor) + " (how far the float32 forward differs " +
        "from the float64 one on this input and target), so every head's effect is rounding. No conclusion is " +
        "drawn about attention.";
    }
    if (rho === null || rho === undefined) {
      return "Attention and the knock-outs cannot be compared here: one of the two gives every head the same score.";
    }
    const chance = chanceLevel(n);
    const r = P.fmt(rho);
    let head;
    if (chance === null) {
      head = "Spearman \u03c1 = " + r + " over " + n + " heads, but with " + n + " heads no ranking can reach the " +
        "two-sided 5% level: even a perfect agreement, \u03c1 = \u00b11, comes by chance 2 times in " + factorial(n) +
        " (" + (200 / factorial(n)).toFixed(1) + "%), so nothing can be said either way.";
    } else {
      const level = chance.level, tol = 1e-9;                        // rho from ranks: 1 can come out as 1 - 1e-16
      const how = chance.exact ? ", Spearman's exact two-sided 5% critical value for " + n + " heads" :
        ", the two-sided 5% level (1.96 / \u221a" + (n - 1) + ", the normal approximation)";
      if (rho >= level - tol) head = "Attention predicted importance here: Spearman \u03c1 = " + r + " over " + n + " heads, at or above the " + P.fmt(level) + how + ".";
      else if (rho <= -level + tol) head = "Attention ranked the heads against their importance here: Spearman \u03c1 = " + r + " over " + n + " heads, at or below \u2212" + P.fmt(level) + how + ".";
      else head = "Attention did not predict importance here: Spearman \u03c1 = " + r + " over " + n + " heads, within \u00b1" + P.fmt(level) + how + ".";
    }
    const byEffect = rows.slice().sort((a, b) => b.effect - a.effect || a.i - b.i);
    const byAttention = rows.slice().sort((a, b) => b.attention - a.attention || a.i - b.i);
    const top = byEffect[0], first = byAttention[0];
    const unit = measure === "cosine" ? "1 \u2212 cosine " : "the target's log-odds fell by ";
    let more = " The head whose knock-out mattered most, " + headName(top) + " (" + unit + P.fmt(top.effect) +
      "), ranks " + top.rankAttention + " of " + n + " by attention";
    more += top === first ? ": attention's first head too." : "; the head attention ranks first, " + headName(first) +
      ", ranks " + first.rankEffect + " by knock-out (" + P.fmt(first.effect) + ").";
    const flips = rows.filter((x) => x.flip).length;
    if (measure !== "cosine") {
      more += " " + (flips ? flips + " of the " + n + " knock-outs " + (flips === 1 ? "changes" : "change") +
                     " the decision at the target's position." : "No knock-out changes the decision at the target's position.");
    }
    return head + more;
  }

  function draw(section) {
    const K = knockout(), g = P.group(), S = P.S;
    const kg = K.groups[g.name];
    const targets = P.targets();
    const k = Math.min(S.target, targets.length - 1);
    const t = targets[k];
    const cosine = K.measure === "cosine";
    const dec = (name) => (kg[name] ? P.decodeArray(kg[name]) : null);
    const att = dec("attention"), eff = dec("effect"), a = dec(cosine ? "value" : "logit"), b = dec(cosine ? "cosine" : "prob");
    const decision = cosine ? null : dec("decision");
    const [L, H, nk] = att.shape;
    const at = (x, l, h) => x.data[(l * H + h) * nk + k];
    const rows = [];
    let skipped = 0;                                                 // heads past the work budget: NaN, not ranked
    for (let l = 0; l < L; l++) for (let h = 0; h < H; h++) {
      if (!Number.isFinite(at(eff, l, h))) { skipped++; continue; }
      const r = { i: rows.length, l: l, h: h, attention: at(att, l, h), effect: at(eff, l, h), a: at(a, l, h), b: at(b, l, h) };
      if (decision) { r.decision = at(decision, l, h); r.flip = r.decision !== K.full.decision[k]; }
      rows.push(r);
    }
    const ra = ranksFromTop(rows.map((r) => r.attention)), re = ranksFromTop(rows.map((r) => r.effect));
    rows.forEach((r, n) => { r.rankAttention = ra[n]; r.rankEffect = re[n]; });
    const rho = kg.spearman[k];
    const keys = kg.keys[k].map((j) => j + " \u201c" + P.shortToken(g.key_tokens[j], 12) + "\u201d").join(", ");
    section.appendChild(el("p", { class: "hint" }, [
      "Target ", P.targetPicker(), (t && t.detail ? " (" + t.detail + ")" : "") + ". " + g.name + ": each of its " +
      (skipped ? rows.length + " knocked-out heads (of " + (rows.length + skipped) + ")" : rows.length + " heads") +
      " knocked out in turn (its slice of the concatenated heads zeroed before the output " +
      "projection), the model run again on the same input and its own output. Ranked by attention: the head's weight " +
      "on the " + K.top_keys + " keys most relevant to the target (" + keys + "), " +
      (kg.queries[k] === null ? "averaged over the query rows" : "in query row " + kg.queries[k] + " \u201c" +
       P.shortToken(g.query_tokens[kg.queries[k]], 12) + "\u201d") +
      ". Ranked by knock-out: " + (cosine ? "1 \u2212 the cosine between the knocked-out and the full embedding." :
      "how far the target's log-odds log(p/(1\u2212p)) fell (nats; negative: they rose).") + " Click a head to open it."]));
    if (K.skipped) {                                                 // the work budget ran out (docs/explorer.md)
      section.appendChild(el("p", { id: "knockout-skipped", class: "hint", text: K.skipped.note +
        (skipped ? " In " + g.name + ": " + skipped + " of its " + (rows.length + skipped) + " heads, left out of both rankings." : "") }));
    }
    if (!rows.length) {
      return { view: "knockout", group: g.name, target: t ? t.name : null, measure: K.measure, spearman: null,
               skipped: skipped, heads: [] };
    }
    section.appendChild(el("p", { id: "knockout-sentence", text: verdict(rows, rho, K.measure, K.noise_floor ? K.noise_floor[k] : NaN) }));
    if (rho !== null && rho !== undefined) section.lastChild.dataset.rho = String(rho);

    function table(id, title, key, rankKey, extra) {
      const sorted = rows.slice().sort((x, y) => x[rankKey] - y[rankKey] || x.i - y.i);
      const tb = el("table", { class: "num sortable", id: id });
      const head = el("tr", null, [el("th", { text: "rank" }), el("th", { class: "tok", text: "head" }), el("th", { text: title })]);
      for (const [, name] of extra) head.appendChild(el("th", { text: name }));
      tb.appendChild(el("thead", null, [head]));
      const body = el("tbody");
      for (const r of sorted) {
        const tr = el("tr", { "data-layer": r.l, "data-head": r.h, tabindex: 0,
                              "aria-label": "layer " + r.l + " head " + r.h + ", rank " + r[rankKey] + "; Enter opens it" });
        tr.appendChild(el("td", { class: "rank", "data-value": r[rankKey], text: Number.isInteger(r[rankKey]) ? String(r[rankKey]) : r[rankKey].toFixed(1) }));
        const hc = el("td", { class: "tok", text: headName(r) });
        hc.style.borderLeft = "4px solid " + P.headColour(r.h);
        tr.appendChild(hc);
        tr.appendChild(P.numCell("td", r[key], key));
        for (const [k2] of extra) {
          if (k2 === "decision") tr.appendChild(el("td", { class: "decision", "data-value": r.decision, text: (r.flip ? "\u2192 " : "") + decisionName(r.decision) }));
          else tr.appendChild(P.numCell("td", r[k2], k2));
        }
        tr.addEventListener("click", () => openHead(r, said));
        tr.addEventListener("keydown", (ev) => { if (ev.key === "Enter" || ev.key === " ") { ev.preventDefault(); openHead(r, said); } });
        body.appendChild(tr);
      }
      tb.appendChild(body);
      return el("div", { class: "panel" }, [el("h2", { text: "by " + title }), el("div", { class: "scroll" }, [tb])]);
    }
    const extra = cosine ? [["a", "length"], ["b", "cosine"]] : [["a", "logit"], ["b", "probability"], ["decision", "decision"]];

    // the two rankings as two columns of heads with a line joining each head's two places
    const rowH = 16, colW = 110, gap = 220, top = 20;
    const c = P.makeCanvas(2 * colW + gap + 20, top + rows.length * rowH + 8);
    c.id = "knockout-canvas";
    const said = P.keyboardCanvas(c, "knockout-said", rows.length + " heads ranked by attention (left) and by knock-out " +
                                  "(right); arrow keys choose a head, Enter opens it");
    const ctx = c._ctx;
    const y = (rank) => top + (rank - 0.5) * rowH;
    let focus = -1;                                                  // the keyboard's head, by knock-out rank order
    const byEffect = rows.slice().sort((x, y2) => x.rankEffect - y2.rankEffect || x.i - y2.i);
    function paint() {
      ctx.fillStyle = "#fff";
      ctx.fillRect(0, 0, 2 * colW + gap + 20, top + rows.length * rowH + 8);
      ctx.font = "12px system-ui, sans-serif";
      ctx.fillStyle = "#1d232a";
      ctx.fillText("by attention", 10, 13);
      ctx.fillText("by knock-out", colW + gap + 10, 13);
      const maxEff = Math.max(1e-12, ...rows.map((r) => Math.abs(r.effect)));
      for (const r of rows) {
        const chosen = focus >= 0 && byEffect[focus] === r;
        ctx.strokeStyle = P.headColour(r.h);
        ctx.globalAlpha = chosen ? 1 : 0.25 + 0.75 * Math.abs(r.effect) / maxEff;
        ctx.lineWidth = chosen ? 3 : 1.5;
        ctx.beginPath();
        ctx.moveTo(colW, y(r.rankAttention));
        ctx.lineTo(colW + gap, y(r.rankEffect));
        ctx.stroke();
        ctx.globalAlpha = 1;
        ctx.fillStyle = chosen ? "#2166ac" : "#1d232a";
        ctx.fillText(headName(r) + " " + P.fmt(r.attention), 10, y(r.rankAttention) + 4);
        ctx.fillText(headName(r) + " " + P.fmt(r.effect) + (r.flip ? " \u21c4" : ""), colW + gap + 10, y(r.rankEffect) + 4);
      }
      said.textContent = focus >= 0 ? headName(byEffect[focus]) + ": rank " + byEffect[focus].rankEffect + " by knock-out, " +
        byEffect[focus].rankAttention + " by attention" : "";
    }
    paint();
    c.addEventListener("focus", () => { if (focus < 0) focus = 0; paint(); });
    c.addEventListener("blur", () => { paint(); });
    c.addEventListener("keydown", (ev) => {
      const move = { ArrowUp: -1, ArrowDown: 1, ArrowLeft: -1, ArrowRight: 1 }[ev.key];
      if (move) { focus = Math.max(0, Math.min(rows.length - 1, focus + move)); paint(); }
      else if ((ev.key === "Enter" || ev.key === " ") && focus >= 0) openHead(byEffect[focus], said);
      else return;
      ev.preventDefault();
    });
    c.addEventListener("click", (ev) => {
      const box = c.getBoundingClientRect();
      const x = ev.clientX - box.left, rank = Math.floor((ev.clientY - box.top - top) / rowH) + 1;
      const right = x > colW + gap / 2;
      const hit = rows.filter((r) => Math.floor(right ? r.rankEffect : r.rankAttention) === rank ||
                                     Math.ceil(right ? r.rankEffect : r.rankAttention) === rank);
      if (hit.length) openHead(hit[0], said);
    });
    P.S.canvas = c;
    section.appendChild(el("div", { class: "row" }, [
      table("knockout-by-attention", "attention", "attention", "rankAttention", []),
      el("div", null, [el("div", { class: "scroll" }, [c]), said]),
      table("knockout-by-effect", cosine ? "1 \u2212 cosine" : "knock-out effect", "effect", "rankEffect", extra)]));
    return { view: "knockout", group: g.name, target: t ? t.name : null, measure: K.measure, spearman: rho,
             skipped: skipped, top_keys: kg.keys[k], full: cosine ? { value: K.full.value[k] } :
               { logit: K.full.logit[k], prob: K.full.prob[k], decision: K.full.decision[k] },
             heads: rows.map((r) => ({ layer: r.l, head: r.h, attention: r.attention, effect: r.effect,
                                       rank_attention: r.rankAttention, rank_effect: r.rankEffect,
                                       [cosine ? "length" : "logit"]: r.a, [cosine ? "cosine" : "prob"]: r.b,
                                       decision: r.decision === undefined ? null : r.decision })) };
  }

  P.addView("knockout", "Knock-outs", draw, () => !!knockout());
})();
