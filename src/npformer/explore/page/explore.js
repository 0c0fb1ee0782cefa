// npformer explore: the page half of the attention explorer (issue 13).
//
// Plain JavaScript and <canvas>, no framework, no network: the whole model's attention arrives in the
// JSON payload inlined in this file (docs/EXPLORE_FORMAT.md) and everything else is computed here.
//
// How to read this file:
//   1. reading the payload: base64 arrays into typed arrays;
//   2. attention, recomputed from the stored q and k in float64, exactly as npformer's
//      ops/attention.py attention_forward does (scale, bias, mask, softmax);
//   3. the page state and the controls (input, attention group, layer, heads, query token, threshold);
//   4. one function per view (head, model, step, explain, image, matrix, training, stats), each drawing
//      its canvas and returning the numbers it shows, for the JSON export;
//   5. export, and the --serve form.
"use strict";

(function () {
  // ---------------------------------------------------------------------------------------------
  // 1. Reading the payload
  // ---------------------------------------------------------------------------------------------

  const LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

  // base64 text -> the raw bytes it encodes
  function base64Bytes(text) {
    const bin = atob(text);
    const bytes = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
    return bytes;
  }

  // IEEE half precision (binary16) -> a JS number: sign, 5 exponent bits, 10 fraction bits.
  function halfToFloat(h) {
    const sign = h & 0x8000 ? -1 : 1;
    const exp = (h >> 10) & 0x1f;
    const frac = h & 0x3ff;
    if (exp === 0) return sign * frac * Math.pow(2, -24);          // subnormal
    if (exp === 31) return frac ? NaN : sign * Infinity;
    return sign * (1 + frac / 1024) * Math.pow(2, exp - 15);
  }

  // {"dtype", "shape", "b64", "scale"?} -> {shape, data}; "u8" arrays with a "scale" (attention maps
  // stored as round(x * 255)) come back as floats, an "u8" without one (a mask, an image) as bytes.
  function decodeArray(a) {
    if (!a) return null;
    if (a.codec && !a._bytes) throw new Error("array with codec " + a.codec + " was not inflated at load");
    const bytes = a._bytes || base64Bytes(a.b64);
    const n = a.shape.reduce((x, y) => x * y, 1);
    const view = new DataView(bytes.buffer);
    let data;
    if (a.dtype === "f32") {
      if (LITTLE_ENDIAN) data = new Float32Array(bytes.buffer, 0, n);
      else { data = new Float32Array(n); for (let i = 0; i < n; i++) data[i] = view.getFloat32(4 * i, true); }
    } else if (a.dtype === "f16") {
      data = new Float32Array(n);
      for (let i = 0; i < n; i++) data[i] = halfToFloat(view.getUint16(2 * i, true));
    } else if (a.dtype === "i32") {
      data = new Int32Array(n);
      for (let i = 0; i < n; i++) data[i] = view.getInt32(4 * i, true);
    } else if (a.dtype === "u8") {
      if (a.scale !== undefined && a.scale !== null) {
        data = new Float32Array(n);
        for (let i = 0; i < n; i++) data[i] = bytes[i] * a.scale;
      } else data = bytes.subarray(0, n);
    } else {
      throw new Error("unknown array dtype " + a.dtype);
    }
    if (data.length !== n) throw new Error("array of shape " + a.shape + " has " + data.length + " values");
    return { shape: a.shape, data: data };
  }

  // "zlib-shuffle4" (large f32 arrays such as MiniLM's q, k, v): the base64 holds a zlib stream of
  // the bytes regrouped in 4 planes (byte b of every value together, planes[b*n + i] = bytes[4*i + b]),
  // which compresses better. The browser's own DecompressionStream inflates it (asynchronously, so
  // every such array is inflated once when the payload is loaded); then the planes are interleaved back.
  async function inflate(bytes) {
    const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("deflate"));
    return new Uint8Array(await new Response(stream).arrayBuffer());
  }
  async function unpackArray(a) {
    if (a.codec !== "zlib-shuffle4") throw new Error("unknown array codec " + a.codec);
    const planes = await inflate(base64Bytes(a.b64));
    const n = planes.length / 4;
    const bytes = new Uint8Array(planes.length);
    for (let b = 0; b < 4; b++) {
      const off = b * n;
      for (let i = 0; i < n; i++) bytes[4 * i + b] = planes[off + i];
    }
    a._bytes = bytes;
  }
  // Every array object anywhere in the payload that carries a codec, inflated.
  async function unpackAll(payload) {
    const found = [];
    (function walk(x) {
      if (!x || typeof x !== "object") return;
      if (typeof x.b64 === "string" && x.codec) { found.push(x); return; }
      for (const key in x) walk(x[key]);
    })(payload);
    await Promise.all(found.map(unpackArray));
  }

  // A group's arrays are decoded the first time they are needed (MiniLM's q, k, v are megabytes).
  function arr(g, name) {
    if (!g._decoded) g._decoded = {};
    if (!(name in g._decoded)) g._decoded[name] = decodeArray(g[name]);
    return g._decoded[name];
  }

  // ---------------------------------------------------------------------------------------------
  // 2. Attention, recomputed in float64 from the stored float32 q, k, v
  // ---------------------------------------------------------------------------------------------
  //
  // For layer l, head h and query i (ops/attention.py attention_forward):
  //   score_j  = (q_i . k_j) * scale  (+ bias_ij)      scale = 1/sqrt(D) unless the model says otherwise
  //   score_j  = -inf where the mask forbids key j
  //   w_j      = exp(score_j - max) / sum_j' exp(score_j' - max)   (a fully masked row is all zeros)
  //   out      = sum_j w_j v_j                         this head's slice of the concatenated output

  // Everything the step view shows for one query row; the other views use `weights` only.
  // `edit` (optional, the step view's "try it" controls): {alpha, scale, allowed}: q multiplied by
  // alpha, the scores by `scale` instead of the model's, and `allowed` (Tk 0/1 flags) instead of the
  // model's mask row. Without it (or with alpha 1, the model's scale and mask) the numbers are the model's.
  function attentionRow(g, l, h, i, withValues, edit) {
    const q = arr(g, "q"), k = arr(g, "k");
    const [, H, Tq, D] = q.shape;
    const Tk = k.shape[2];
    const mask = arr(g, "mask"), bias = arr(g, "bias");
    const qOff = ((l * H + h) * Tq + i) * D;
    const kBase = (l * H + h) * Tk * D;
    const alpha = edit ? edit.alpha : 1, scale = edit ? edit.scale : g.scale;
    const given = edit && edit.allowed ? edit.allowed : null;
    const q32 = q.data.subarray(qOff, qOff + D);
    const qi = alpha === 1 ? q32 : Float64Array.from(q32, (x) => alpha * x);      // (D,)
    const dot = new Float64Array(Tk), scaled = new Float64Array(Tk), score = new Float64Array(Tk);
    const allowed = new Uint8Array(Tk);
    let max = -Infinity;
    for (let j = 0; j < Tk; j++) {
      let s = 0;
      const kOff = kBase + j * D;
      for (let d = 0; d < D; d++) s += qi[d] * k.data[kOff + d];
      dot[j] = s;
      scaled[j] = s * scale;
      let x = scaled[j] + (bias ? bias.data[i * Tk + j] : 0);
      allowed[j] = given ? given[j] : mask ? mask.data[i * Tk + j] : 1;
      if (!allowed[j]) x = -Infinity;
      score[j] = x;
      if (x > max) max = x;
    }
    if (!isFinite(max)) max = 0;                // all keys masked: softmax gives zeros, not NaN
    const w = new Float64Array(Tk);
    let sum = 0;
    for (let j = 0; j < Tk; j++) { w[j] = Math.exp(score[j] - max); sum += w[j]; }
    const r = sum > 0 ? 1 / sum : 0;
    for (let j = 0; j < Tk; j++) w[j] *= r;
    const row = { q: qi, dot: dot, scaled: scaled, score: score, allowed: allowed, weights: w, D: D, Tk: Tk };
    if (withValues) {
      const v = arr(g, "v");
      const Dv = v.shape[3];
      const vBase = (l * H + h) * Tk * Dv;
      const out = new Float64Array(Dv);
      for (let j = 0; j < Tk; j++) {
        if (w[j] === 0) continue;
        for (let d = 0; d < Dv; d++) out[d] += w[j] * v.data[vBase + j * Dv + d];
      }
      row.out = out;
      row.Dv = Dv;
    }
    return row;
  }

  // The (Tq, Tk) weights of one head, cached; from q and k when stored, else from the 8-bit maps.
  // The same arithmetic as attentionRow, in the same order (so the same numbers), without the
  // intermediate rows: the model view needs every head, 72 of them for MiniLM.
  function headWeights(g, l, h) {
    if (!g._w) g._w = {};
    const key = l + "," + h;
    if (g._w[key]) return g._w[key];
    const Tq = g.query_tokens.length, Tk = g.key_tokens.length;
    let W;
    if (g.derived) {
      W = g.derived(l, h);                      // a view of another group (words, padding hidden): units.js
    } else if (g.q) {
      const q = arr(g, "q").data, k = arr(g, "k").data;
      const mask = arr(g, "mask"), bias = arr(g, "bias");
      const D = arr(g, "q").shape[3], H = g.n_heads, scale = g.scale;
      const kBase = (l * H + h) * Tk * D;
      const score = new Float64Array(Tk);
      W = new Float32Array(Tq * Tk);
      for (let i = 0; i < Tq; i++) {
        const qOff = ((l * H + h) * Tq + i) * D;
        let max = -Infinity;
        for (let j = 0; j < Tk; j++) {
          let x;
          if (mask && !mask.data[i * Tk + j]) x = -Infinity;
          else {
            let s = 0;
            const kOff = kBase + j * D;
            for (let d = 0; d < D; d++) s += q[qOff + d] * k[kOff + d];
            x = s * scale + (bias ? bias.data[i * Tk + j] : 0);
          }
          score[j] = x;
          if (x > max) max = x;
        }
        if (!isFinite(max)) max = 0;
        let sum = 0;
        for (let j = 0; j < Tk; j++) { score[j] = Math.exp(score[j] - max); sum += score[j]; }
        const r = sum > 0 ? 1 / sum : 0;
        for (let j = 0; j < Tk; j++) W[i * Tk + j] = score[j] * r;
      }
    } else {
      const w = arr(g, "weights");
      const off = (l * g.n_heads + h) * Tq * Tk;
      W = w.data.subarray(off, off + Tq * Tk);
    }
    g._w[key] = W;
    return W;
  }

  // ---------------------------------------------------------------------------------------------
  // 3. State and controls
  // ---------------------------------------------------------------------------------------------

  const $ = (id) => document.getElementById(id);
  const S = {
    payload: null, input: 0, group: 0, layer: 0, heads: new Set([0]), focusHead: 0, query: 0,
    threshold: 0.02, view: "head", selected: new Set(), hover: null, target: 0, rolloutLayer: -1,
    // the step view's edits: a scale choice, q's factor alpha, and mask rows keyed "input,group,query"
    edit: { scale: "model", alpha: 1, masks: {} },
    imageSource: "attention", stretch: false, trainStep: 0, trainHead: { l: 0, h: 0 }, sort: { key: "layer", dir: 1 }, numbers: null, canvas: null,
    // the head view's filter by token kind ({query, key}, from the blocks view), null: every token
    kindFilter: null,
    // true until the reader picks heads: the chosen heads are then the layer's most focused one (focusedHead)
    headsAuto: true,
  };

  // What the scripts after this one plug in (each optional): viewGroup(g) -> the group the head, model,
  // matrix and statistics views read (words merged, padding hidden: units.js); wrapContext(ctx, w, h) -> the
  // 2D context a view draws with, and newPath() -> its Path2D (svg.js records them for "Export SVG").
  // onRender: functions called before each view is drawn (to show or hide their own controls).
  const HOOKS = { viewGroup: null, wrapContext: null, newPath: null, onRender: [] };
  function newPath() { return HOOKS.newPath ? HOOKS.newPath() : new Path2D(); }
  // The group as the head, model, matrix and statistics views read it.
  function viewGroup() { return HOOKS.viewGroup ? HOOKS.viewGroup(group()) : group(); }
  // A stored layer's real number (--layers keeps some layers only: GROUP.layers names them).
  function layerName(g, l) { return g && g.layers ? g.layers[l] : l; }

  const PALETTE = ["#1f6fb4", "#e4572e", "#2a9d3f", "#8e44ad", "#d4a017", "#17a2b8", "#c2185b", "#6d4c41",
                   "#546e7a", "#7cb342", "#3949ab", "#f06292"];
  function headColour(h) {
    return h < PALETTE.length ? PALETTE[h] : "hsl(" + ((h * 137.5) % 360) + ",65%,45%)";
  }

  function input() { return S.payload.inputs[S.input]; }
  function group() { return input().groups[S.group]; }
  function isImageKey(g, j) { return g.token_kinds && g.token_kinds.key && g.token_kinds.key[j] === "patch"; }

  // A number as the page shows it; the exact float64 value goes in the element's data-value.
  function fmt(x) {
    if (x === -Infinity) return "-inf";
    if (x === Infinity) return "inf";
    if (Number.isNaN(x)) return "nan";
    const a = Math.abs(x);
    if (a !== 0 && (a >= 1e4 || a < 1e-3)) return x.toExponential(2);
    return x.toFixed(4);
  }
  function numCell(tag, x, cls) {
    const el = document.createElement(tag);
    el.textContent = fmt(x);
    el.dataset.value = String(x);
    if (cls) el.className = cls;
    return el;
  }
  function el(tag, attrs, children) {
    const e = document.createElement(tag);
    if (attrs) for (const k in attrs) {
      if (k === "text") e.textContent = attrs[k];
      else if (k === "class") e.className = attrs[k];
      else e.setAttribute(k, attrs[k]);
    }
    if (children) for (const c of children) e.appendChild(typeof c === "string" ? document.createTextNode(c) : c);
    return e;
  }
  function option(select, value, text) {
    const o = document.createElement("option");
    o.value = value;
    o.textContent = text;
    select.appendChild(o);
  }
  // A token as a label: a blank one (a space) shows as the open-box sign, never as nothing.
  function tokenText(t) { t = String(t); return t.trim() ? t : "\u2423"; }
  // A token label cut to n characters; a blank token shows as the open-box sign.
  function shortToken(t, n) {
    t = String(t);
    if (!t.trim()) return "\u2423";
    return t.length > n ? t.slice(0, n - 1) + "\u2026" : t;
  }

  // A canvas sized in CSS pixels, drawn at the screen's pixel density.
  function makeCanvas(width, height) {
    const c = document.createElement("canvas");
    const dpr = window.devicePixelRatio || 1;
    c.width = Math.round(width * dpr);
    c.height = Math.round(height * dpr);
    c.style.width = width + "px";
    c.style.height = height + "px";
    const ctx = c.getContext("2d");
    ctx.scale(dpr, dpr);
    c._ctx = HOOKS.wrapContext ? HOOKS.wrapContext(ctx, width, height) : ctx;
    return c;
  }

  // White to dark blue, for attention-like values in [0, 1].
  // A canvas the keyboard can focus and drive, described by ``label``; returns the status line (id
  // ``saidId``) where the view names what the keys reached, for screen readers.
  function keyboardCanvas(c, saidId, label) {
    c.tabIndex = 0;
    c.setAttribute("role", "application");
    c.setAttribute("aria-label", label);
    return el("p", { id: saidId, class: "hint", role: "status" });
  }

  function heat(v) {
    v = Math.max(0, Math.min(1, v));
    return [Math.round(255 - v * 247), Math.round(255 - v * 207), Math.round(255 - v * 148)];
  }

  function fillControls() {
    const inputs = $("input-select");
    inputs.textContent = "";
    S.payload.inputs.forEach((inp, n) => option(inputs, n, shortToken(inp.label, 50)));
    inputs.value = S.input;
    inputs.parentElement.hidden = S.payload.inputs.length < 2;
    const groups = $("group-select");
    groups.textContent = "";
    input().groups.forEach((g, n) => option(groups, n, g.name));
    groups.value = S.group;
    fillGroupControls();
  }

  // Layers, heads and query tokens depend on the attention group.
  function fillGroupControls() {
    const g = group();
    S.hover = null;
    S.kindFilter = null;
    S.layer = Math.min(S.layer, g.n_layers - 1);
    S.query = Math.min(S.query, g.query_tokens.length - 1);
    S.heads = new Set([...S.heads].filter((h) => h < g.n_heads));
    if (!S.heads.size) for (let h = 0; h < g.n_heads; h++) S.heads.add(h);
    S.focusHead = Math.min(S.focusHead, g.n_heads - 1);
    S.selected = new Set([...S.selected].filter((i) => i < g.query_tokens.length));
    const layers = $("layer-select");
    layers.textContent = "";
    for (let l = 0; l < g.n_layers; l++) option(layers, l, String(layerName(g, l)));
    layers.value = S.layer;
    const queries = $("query-select");
    queries.textContent = "";
    g.query_tokens.forEach((t, i) => option(queries, i, i + ": " + shortToken(t, 24)));
    queries.value = S.query;
    const boxes = $("head-boxes");
    boxes.textContent = "Heads ";
    for (let h = 0; h < g.n_heads; h++) {
      const box = el("input", { type: "checkbox", "data-head": h });
      box.checked = S.heads.has(h);
      box.addEventListener("change", () => {
        if (box.checked) { S.heads.add(h); S.focusHead = h; } else S.heads.delete(h);
        S.headsAuto = false;
        render();
      });
      const label = el("label", { title: "head " + h }, [box, String(h)]);
      label.style.borderBottom = "3px solid " + headColour(h);
      boxes.appendChild(label);
    }
    const all = el("button", { type: "button", class: "all", id: "heads-all", text: "all" });
    all.addEventListener("click", () => { for (let h = 0; h < g.n_heads; h++) S.heads.add(h); S.headsAuto = false; syncHeadBoxes(); render(); });
    const none = el("button", { type: "button", id: "heads-none", text: "none" });
    none.addEventListener("click", () => { S.heads.clear(); S.headsAuto = false; syncHeadBoxes(); render(); });
    boxes.append(all, " ", none);
  }

  function syncHeadBoxes() {
    for (const box of document.querySelectorAll("#head-boxes input")) box.checked = S.heads.has(+box.dataset.head);
    $("layer-select").value = S.layer;
    $("query-select").value = S.query;
  }

  // The default head of layer l: the most focused one, the lowest mean attention entropy (the statistics
  // view's, over the rows shown); ties to the lower head. -1 when the group has no statistics.
  function focusedHead(g, l) {
    const ent = g.stats && g.stats.entropy ? g.stats.entropy[l] : null;
    if (!ent) return -1;
    let best = 0;
    for (let h = 1; h < ent.length; h++) if (ent[h] < ent[best]) best = h;
    return best;
  }
  // While the heads are the default, they follow the layer and the group.
  function autoHeads() {
    if (!S.headsAuto) return;
    const h = focusedHead(viewGroup(), S.layer);
    if (h >= 0 && S.heads.size === 1 && S.heads.has(h)) return;  // unchanged: the step view's own head stays
    S.heads = h < 0 ? new Set(Array.from({ length: group().n_heads }, (_, n) => n)) : new Set([h]);
    if (h >= 0) S.focusHead = h;
    syncHeadBoxes();
  }

  // Open one head (from the model view, the statistics table or the training grid).
  function openHead(l, h, view) {
    S.headsAuto = false;
    S.layer = l;
    S.heads = new Set([h]);
    S.focusHead = h;
    syncHeadBoxes();
    setView(view || "head");
  }

  function setView(name) {
    S.view = name;
    for (const b of document.querySelectorAll("#tabs button[data-view]")) b.classList.toggle("active", b.dataset.view === name);
    for (const v of document.querySelectorAll(".view")) v.classList.toggle("active", v.id === "view-" + name);
    render();
  }

  // Which tabs make sense for this input (no image view without an image, etc.).
  function updateTabs() {
    const inp = input();
    const avail = {
      head: true, model: true, step: !!group().q, matrix: true, stats: !!group().stats,
      explain: !!(group().rollout || group().relevance),
      image: !!inp.image,
      training: !!S.payload.training,
    };
    for (const name in EXTRA_VIEWS) avail[name] = !!EXTRA_VIEWS[name].available();
    for (const b of document.querySelectorAll("#tabs button[data-view]")) {
      b.disabled = !avail[b.dataset.view];
      const optional = b.dataset.view === "training" || b.dataset.view === "image" || b.dataset.view in EXTRA_VIEWS;
      b.hidden = !avail[b.dataset.view] && optional;      // a view this model never has is not shown at all
    }
    if (!avail[S.view]) setViewQuiet("head");
  }
  function setViewQuiet(name) {
    S.view = name;
    for (const b of document.querySelectorAll("#tabs button[data-view]")) b.classList.toggle("active", b.dataset.view === name);
    for (const v of document.querySelectorAll(".view")) v.classList.toggle("active", v.id === "view-" + name);
  }

  function render() {
    for (const f of HOOKS.onRender) f();
    updateTabs();
    autoHeads();
    const section = $("view-" + S.view);
    section.textContent = "";
    const draw = VIEWS[S.view];
    S.canvas = null;
    S.numbers = draw(section);
  }

  // ---------------------------------------------------------------------------------------------
  // 4. Views
  // ---------------------------------------------------------------------------------------------

  // 4.1 Head view: query tokens on the left, key tokens on the right, one line per (query, key)
  // pair per chosen head, as opaque as the weight. Lines under the threshold are not drawn, which
  // keeps 512 tokens quick. Hover a token to see only its lines; click query tokens to select them
  // and see their attention summed.
  function headView(section) {
    const g = viewGroup();
    const Tq = g.query_tokens.length, Tk = g.key_tokens.length;
    const heads = [...S.heads].sort((a, b) => a - b);
    const T = Math.max(Tq, Tk);
    const rowH = T <= 48 ? 20 : T <= 128 ? 15 : 12;
    const font = Math.max(9, rowH - 5);
    const labelW = 150, gap = 240, barW = 70, top = 24;
    const width = labelW * 2 + gap + barW, height = top + T * rowH + 8;
    section.appendChild(el("p", { class: "hint", text:
      "Layer " + layerName(g, S.layer) + " of " + g.name + ". Each line joins a query token (left) to a key token (right); " +
      "its opacity is the attention weight, its colour the head. Lines under " + S.threshold + " are hidden. " +
      "Hover a token to isolate it; click query tokens to select them and sum their attention (the bars on the right, " +
      "averaged over the chosen heads). By keyboard: focus the drawing, then the arrow keys move between tokens " +
      "(left: queries, right: keys), Enter or Space selects a query token, Escape lets go." }));
    if (S.headsAuto && heads.length === 1 && g.stats) {
      section.appendChild(el("p", { class: "hint", id: "head-rule", text: "Shown: head " + heads[0] + " alone, the most " +
        "focused head of layer " + layerName(g, S.layer) + ": the lowest mean attention entropy, " +
        fmt(g.stats.entropy[S.layer][heads[0]]) + " nats (the Head statistics tab lists every head's). Tick " +
        "more heads, or all, to compare them." }));
    }
    // the blocks view's filter: only query tokens of one kind and key tokens of one kind
    const kinds = g.token_kinds || { query: [], key: [] };
    const filter = S.kindFilter;
    const qShown = (i) => !filter || kinds.query[i] === filter.query;
    const kShown = (j) => !filter || kinds.key[j] === filter.key;
    if (filter) {
      const clear = el("button", { type: "button", id: "kind-filter-clear", text: "show every token" });
      clear.addEventListener("click", () => { S.kindFilter = null; render(); });
      section.appendChild(el("p", { class: "hint", id: "kind-filter" }, [
        "Only " + filter.query + " queries reading " + filter.key + " keys are drawn. ", clear]));
    }
    const box = el("div", { class: "scroll" });
    const c = makeCanvas(width, height);
    c.id = "head-canvas";
    const said = keyboardCanvas(c, "head-said", "attention lines of layer " + S.layer +
                                "; arrow keys move between tokens, Enter selects a query token");
    box.appendChild(c);
    const summed = el("div", { id: "summed" });
    section.append(el("div", { class: "row" }, [box, summed]), said);
    S.canvas = c;
    const xL = labelW, xR = labelW + gap;
    const yOf = (i) => top + i * rowH + rowH / 2;
    const Ws = heads.map((h) => headWeights(g, S.layer, h));

    // the per-key sums over the selected query tokens (or the hovered one), mean over heads
    function keySums(rows) {
      const sums = new Float64Array(Tk);
      if (!rows.length || !heads.length) return sums;
      for (const W of Ws) for (const i of rows) for (let j = 0; j < Tk; j++) sums[j] += W[i * Tk + j] / heads.length;
      return sums;
    }

    function draw() {
      const ctx = c._ctx;
      ctx.clearRect(0, 0, width, height);
      ctx.fillStyle = "#fff";
      ctx.fillRect(0, 0, width, height);
      ctx.font = "600 12px system-ui, sans-serif";
      ctx.fillStyle = "#5f6b76";
      ctx.textAlign = "right";
      ctx.fillText("query", xL - 6, 14);
      ctx.textAlign = "left";
      ctx.fillText("key", xR + 6, 14);
      const hov = S.hover;
      let rows = null;                                 // query rows whose lines are drawn
      let onlyKey = -1;
      if (hov && hov.side === "q") rows = [hov.i];
      else if (S.selected.size) rows = [...S.selected].sort((a, b) => a - b);
      if (hov && hov.side === "k") onlyKey = hov.i;
      // highlights behind the labels
      for (const i of S.selected) { ctx.fillStyle = "#ffe9a8"; ctx.fillRect(0, top + i * rowH, xL, rowH); }
      if (hov) {
        ctx.fillStyle = "#dbe9f6";
        if (hov.side === "q") ctx.fillRect(0, top + hov.i * rowH, xL, rowH);
        else ctx.fillRect(xR, top + hov.i * rowH, labelW, rowH);
      }
      // lines, grouped per head into 16 opacity levels so that each level is one stroke() call
      const LEVELS = 16;
      ctx.lineWidth = T > 200 ? 1 : 1.6;
      heads.forEach((h, n) => {
        const W = Ws[n];
        const paths = [];
        for (let b = 0; b < LEVELS; b++) paths.push(newPath());
        const iList = rows || Array.from({ length: Tq }, (_, i) => i);
        for (const i of iList) {
          if (!qShown(i)) continue;
          const y0 = yOf(i);
          const j0 = onlyKey >= 0 ? onlyKey : 0, j1 = onlyKey >= 0 ? onlyKey + 1 : Tk;
          for (let j = j0; j < j1; j++) {
            const w = W[i * Tk + j];
            if (w < S.threshold || w <= 0 || !kShown(j)) continue;
            const b = Math.min(LEVELS - 1, Math.floor(w * LEVELS));
            paths[b].moveTo(xL, y0);
            paths[b].lineTo(xR, yOf(j));
          }
        }
        ctx.strokeStyle = headColour(h);
        for (let b = 0; b < LEVELS; b++) {
          ctx.globalAlpha = Math.min(1, (b + 1) / LEVELS);
          ctx.stroke(paths[b]);
        }
        ctx.globalAlpha = 1;
      });
      // summed attention bars beside the keys
      const sums = keySums(rows || []);
      if (rows) {
        let mx = 0;
        for (let j = 0; j < Tk; j++) mx = Math.max(mx, sums[j]);
        for (let j = 0; j < Tk; j++) {
          if (sums[j] <= 0) continue;
          ctx.fillStyle = "rgba(33,102,172,0.75)";
          ctx.fillRect(xR + labelW, top + j * rowH + 2, barW * sums[j] / Math.max(mx, 1e-12), rowH - 4);
        }
      }
      // labels
      ctx.font = font + "px system-ui, sans-serif";
      ctx.textBaseline = "middle";
      ctx.fillStyle = "#1d232a";
      ctx.textAlign = "right";
      for (let i = 0; i < Tq; i++) ctx.fillText(shortToken(g.query_tokens[i], 20), xL - 6, yOf(i));
      ctx.textAlign = "left";
      for (let j = 0; j < Tk; j++) ctx.fillText(shortToken(g.key_tokens[j], 20), xR + 6, yOf(j));
      ctx.textBaseline = "alphabetic";
      showSums(rows, sums);
    }

    // the summed attention as numbers, largest first
    function showSums(rows, sums) {
      summed.textContent = "";
      if (!rows) { summed.appendChild(el("p", { class: "hint", text: "Click query tokens to sum their attention." })); return; }
      summed.appendChild(el("h2", { text: "Attention of " + rows.map((i) => tokenText(g.query_tokens[i])).join(" + ") }));
      const t = el("table", { class: "num", id: "summed-table" });
      t.appendChild(el("tr", null, [el("th", { class: "tok", text: "key" }), el("th", { text: "summed" })]));
      const order = Array.from({ length: Tk }, (_, j) => j).sort((a, b) => sums[b] - sums[a]).slice(0, 20);
      for (const j of order) {
        const tr = el("tr", { "data-key": j }, [el("td", { class: "tok", text: j + ": " + tokenText(g.key_tokens[j]) })]);
        tr.appendChild(numCell("td", sums[j]));
        t.appendChild(tr);
      }
      summed.appendChild(t);
    }

    function hit(ev) {
      const r = c.getBoundingClientRect();
      const x = ev.clientX - r.left, y = ev.clientY - r.top;
      const i = Math.floor((y - top) / rowH);
      if (x < xL && i >= 0 && i < Tq) return { side: "q", i: i };
      if (x > xR && x < xR + labelW && i >= 0 && i < Tk) return { side: "k", i: i };
      return null;
    }
    c.addEventListener("mousemove", (ev) => {
      const h = hit(ev);
      if (JSON.stringify(h) !== JSON.stringify(S.hover)) { S.hover = h; draw(); }
    });
    c.addEventListener("mouseleave", () => { S.hover = null; draw(); });
    function toggle(i) {                               // select or unselect query token i
      if (S.selected.has(i)) S.selected.delete(i); else S.selected.add(i);
      S.query = i;
      $("query-select").value = S.query;
    }
    c.addEventListener("click", (ev) => {
      const h = hit(ev);
      if (!h || h.side !== "q") return;
      toggle(h.i);
      draw();
    });
    function announce(h) {
      said.textContent = !h ? "" : h.side === "q"
        ? "query token " + h.i + " \u201c" + g.query_tokens[h.i] + "\u201d" + (S.selected.has(h.i) ? ", selected" : "")
        : "key token " + h.i + " \u201c" + g.key_tokens[h.i] + "\u201d";
    }
    // the keyboard moves the same hover the mouse does: Up/Down along a side, Left/Right between sides
    c.addEventListener("keydown", (ev) => {
      const start = S.hover || { side: "q", i: Math.min(Math.max(S.query || 0, 0), Tq - 1) };
      let next = start;
      if (ev.key === "Escape") {
        next = null;
      } else if (ev.key === "ArrowDown" || ev.key === "ArrowUp") {
        const n = start.side === "q" ? Tq : Tk;
        if (S.hover) next = { side: start.side, i: Math.max(0, Math.min(n - 1, start.i + (ev.key === "ArrowDown" ? 1 : -1))) };
      } else if (ev.key === "ArrowLeft" || ev.key === "ArrowRight") {
        const side = ev.key === "ArrowLeft" ? "q" : "k";
        next = { side: side, i: Math.min(start.i, (side === "q" ? Tq : Tk) - 1) };
      } else if (ev.key === "Enter" || ev.key === " ") {
        if (start.side === "q") toggle(start.i);
      } else {
        return;
      }
      ev.preventDefault();
      S.hover = next;
      draw();
      announce(next);
    });
    c.addEventListener("blur", () => { if (S.hover) { S.hover = null; draw(); announce(null); } });
    draw();
    // the numbers of this view (the chosen heads' weights), made when exported
    return () => ({ view: "head", group: g.name, layer: layerName(g, S.layer), heads: heads, query_tokens: g.query_tokens,
             key_tokens: g.key_tokens, threshold: S.threshold, selected: [...S.selected], kind_filter: filter,
             weights: Object.fromEntries(heads.map((h, n) => [h, rowsOf(Ws[n], Tq, Tk)])) });
  }

  function rowsOf(W, Tq, Tk) {
    const out = [];
    for (let i = 0; i < Tq; i++) out.push(Array.from(W.subarray(i * Tk, (i + 1) * Tk)));
    return out;
  }

  // A (rows, cols) map as an image, each value scaled by `norm`; cells are averaged down to at
  // most `px` pixels a side.
  function mapImage(ctx, W, rows, cols, x, y, px, norm) {
    const w = Math.min(px, cols), h = Math.min(px, rows);
    const img = ctx.createImageData(w, h);
    for (let a = 0; a < h; a++) {
      const r0 = Math.floor(a * rows / h), r1 = Math.max(r0 + 1, Math.floor((a + 1) * rows / h));
      for (let b = 0; b < w; b++) {
        const c0 = Math.floor(b * cols / w), c1 = Math.max(c0 + 1, Math.floor((b + 1) * cols / w));
        let s = 0;
        for (let r = r0; r < r1; r++) for (let cc = c0; cc < c1; cc++) s += W[r * cols + cc];
        const [R, G, B] = heat(s / ((r1 - r0) * (c1 - c0)) / norm);
        const o = 4 * (a * w + b);
        img.data[o] = R; img.data[o + 1] = G; img.data[o + 2] = B; img.data[o + 3] = 255;
      }
    }
    return img;
  }

  // Draw a (rows, cols) map into a square of `size` CSS pixels: a small map cell by cell (so an SVG export
  // keeps it as vector rectangles), a large one as an image averaged down to the screen's pixels.
  function drawMap(ctx, W, rows, cols, x, y, size, norm) {
    if (rows * cols <= 1024) {
      const cw = size / cols, ch = size / rows;
      for (let i = 0; i < rows; i++) for (let j = 0; j < cols; j++) {
        const [r, g, b] = heat(W[i * cols + j] / norm);
        ctx.fillStyle = "rgb(" + r + "," + g + "," + b + ")";
        ctx.fillRect(x + j * cw, y + i * ch, cw, ch);
      }
      return;
    }
    const dpr = window.devicePixelRatio || 1;
    const img = mapImage(ctx, W, rows, cols, x, y, Math.round(size * dpr), norm);
    const tmp = document.createElement("canvas");
    tmp.width = img.width; tmp.height = img.height;
    tmp.getContext("2d").putImageData(img, 0, 0);
    ctx.imageSmoothingEnabled = false;
    ctx.drawImage(tmp, x, y, size, size);
  }

  function maxOf(a) { let m = 0; for (let i = 0; i < a.length; i++) if (a[i] > m) m = a[i]; return m; }

  // A grid of small heatmaps, layers in rows and heads in columns, labelled "L0.." and "H0..";
  // mapOf(l, h) gives one (Tq x Tk) map, each drawn scaled to its own largest weight.
  function drawHeadGrid(ctx, L, H, Tq, Tk, mapOf, cell, pad, left, top, names) {
    const width = left + H * (cell + pad), height = top + L * (cell + pad);
    ctx.fillStyle = "#fff";
    ctx.fillRect(0, 0, width, height);
    ctx.font = "12px system-ui, sans-serif";
    ctx.fillStyle = "#5f6b76";
    for (let h = 0; h < H; h++) ctx.fillText("H" + h, left + h * (cell + pad) + cell / 2 - 8, 14);
    for (let l = 0; l < L; l++) {
      ctx.fillStyle = "#5f6b76";
      ctx.fillText("L" + (names ? names[l] : l), 4, top + l * (cell + pad) + cell / 2 + 4);
      for (let h = 0; h < H; h++) {
        const M = mapOf(l, h);
        drawMap(ctx, M, Tq, Tk, left + h * (cell + pad), top + l * (cell + pad), cell, Math.max(maxOf(M), 1e-12));
      }
    }
  }

  // 4.2 Model view: every layer x head as a small heatmap (rows: queries, columns: keys).
  function modelView(section) {
    const g = viewGroup();
    const Tq = g.query_tokens.length, Tk = g.key_tokens.length;
    const L = g.n_layers, H = g.n_heads;
    const cell = Math.max(48, Math.min(96, Math.floor(1000 / H) - 8)), pad = 8, left = 36, top = 22;
    section.appendChild(el("p", { class: "hint", text:
      g.name + ": every layer (rows) and head (columns); each square is the (query x key) attention " +
      "map, darker is more weight, each square scaled to its own largest weight. Click one to open it in the head view " +
      "(or focus the grid, choose a square with the arrow keys and press Enter)." }));
    const c = makeCanvas(left + H * (cell + pad), top + L * (cell + pad));
    c.id = "model-canvas";
    const said = keyboardCanvas(c, "model-said", L + " layers by " + H + " heads of attention maps; " +
                                "arrow keys choose one, Enter opens it");
    const ctx = c._ctx;
    const at = { l: S.layer, h: S.heads.size ? Math.min(...S.heads) : 0 };   // the keyboard's square
    let focused = false;
    function paint() {
      drawHeadGrid(ctx, L, H, Tq, Tk, (l, h) => headWeights(g, l, h), cell, pad, left, top, g.layers);
      for (let l = 0; l < L; l++) for (let h = 0; h < H; h++) {
        if (l === S.layer && S.heads.has(h)) {                     // the heads the head view shows
          ctx.strokeStyle = headColour(h);
          ctx.lineWidth = 2;
          ctx.strokeRect(left + h * (cell + pad) - 2, top + l * (cell + pad) - 2, cell + 4, cell + 4);
        }
      }
      if (focused) {
        ctx.strokeStyle = "#1d232a";
        ctx.lineWidth = 2;
        ctx.setLineDash([4, 3]);
        ctx.strokeRect(left + at.h * (cell + pad) - 4, top + at.l * (cell + pad) - 4, cell + 8, cell + 8);
        ctx.setLineDash([]);
      }
      said.textContent = focused ? "layer " + layerName(g, at.l) + ", head " + at.h : "";
    }
    paint();
    c.addEventListener("focus", () => { focused = true; paint(); });
    c.addEventListener("blur", () => { focused = false; paint(); });
    c.addEventListener("keydown", (ev) => {
      const move = { ArrowLeft: [0, -1], ArrowRight: [0, 1], ArrowUp: [-1, 0], ArrowDown: [1, 0] }[ev.key];
      if (move) {
        at.l = Math.max(0, Math.min(L - 1, at.l + move[0]));
        at.h = Math.max(0, Math.min(H - 1, at.h + move[1]));
        paint();
      } else if (ev.key === "Enter" || ev.key === " ") {
        openHead(at.l, at.h, "head");
      } else {
        return;
      }
      ev.preventDefault();
    });
    c.addEventListener("click", (ev) => {
      const r = c.getBoundingClientRect();
      const h = Math.floor((ev.clientX - r.left - left) / (cell + pad));
      const l = Math.floor((ev.clientY - r.top - top) / (cell + pad));
      if (h >= 0 && h < H && l >= 0 && l < L) openHead(l, h, "head");
    });
    section.append(el("div", { class: "scroll" }, [c]), said);
    S.canvas = c;
    return () => ({ view: "model", group: g.name, n_layers: L, n_heads: H, query_tokens: g.query_tokens,
                    key_tokens: g.key_tokens, weights: Array.from({ length: L }, (_, l) =>
                      Array.from({ length: H }, (_, h) => rowsOf(headWeights(g, l, h), Tq, Tk))) });
  }

  // The first numbers of a vector, for a table cell (the exported JSON has them all).
  function preview(x) {
    const n = Math.min(x.length, 8);
    let t = "";
    for (let d = 0; d < n; d++) t += (d ? " " : "") + x[d].toFixed(3);
    return x.length > n ? t + " \u2026" : t;
  }

  // 4.3 Step view: the lesson's computation for one head and one query token, with the numbers.
  // The learner can change it (the lesson's section 2 by hand): the scale, a factor alpha on q, and
  // the mask row; every number is then recomputed, and each that differs from the model's is marked.
  const LESSON_SECTION_2 = "Why divide by the square root of d?";     // npformer.lesson.SECTIONS[2]
  const ALPHA_LOG2 = { min: -2, max: 3, step: 0.25 };                 // alpha = 2^v, from 0.25 to 8

  // The scales the learner can choose: [value, scale, label]; the model's own comes first (the default).
  function scaleChoices(g, D) {
    const own = Math.abs(g.scale - 1 / Math.sqrt(D)) < 1e-9;
    const out = [["model", g.scale, (own ? "1/\u221a" + D + " = " : "") + g.scale.toPrecision(4) + " (the model's)"]];
    if (!own) out.push(["sqrt", 1 / Math.sqrt(D), "1/\u221a" + D + " = " + (1 / Math.sqrt(D)).toPrecision(4)]);
    out.push(["one", 1, "1 (no scaling)"], ["inv-d", 1 / D, "1/" + D + " = " + (1 / D).toPrecision(4)]);
    return out;
  }

  // This query row's mask as the learner left it (null: untouched, the model's).
  function maskKey(i) { return S.input + "," + S.group + "," + i; }

  // Mark `cell` when `now` differs from the model's `was`: a class, an arrow (up or down) and a title;
  // the arrow is a <sup>, so that "#step-q span" still finds the numbers only.
  function markChange(cell, now, was) {
    if (now === was || (Number.isNaN(now) && Number.isNaN(was))) return;
    cell.classList.add("changed");
    cell.title = "the model's: " + fmt(was);
    cell.appendChild(el("sup", { class: "mark", "aria-hidden": "true", text: now > was ? "\u25b2" : now < was ? "\u25bc" : "\u2022" }));
  }

  // Largest weight, entropy (nats) and its share of log(n) for the n keys the row may read, and the
  // standard deviation of those keys' scores.
  function rowSummary(row) {
    let n = 0, top = -1, H = 0, mean = 0;
    for (let j = 0; j < row.Tk; j++) {
      if (!row.allowed[j]) continue;
      n += 1;
      mean += row.score[j];
      if (top < 0 || row.weights[j] > row.weights[top]) top = j;
      const w = row.weights[j];
      if (w > 0) H -= w * Math.log(w);
    }
    mean = n ? mean / n : 0;
    let v = 0;
    for (let j = 0; j < row.Tk; j++) if (row.allowed[j]) v += (row.score[j] - mean) * (row.score[j] - mean);
    return { n: n, top: top, max: top < 0 ? 0 : row.weights[top], entropy: H,
             share: n > 1 ? H / Math.log(n) : 0, std: n ? Math.sqrt(v / n) : 0 };
  }

  function stepView(section) {
    const g = group();
    const H = g.n_heads, D = g.head_dim;
    const h = S.focusHead, i = S.query, l = S.layer;
    // its own head picker: the step view follows one head
    const pick = el("select", { id: "step-head" });
    for (let n = 0; n < H; n++) option(pick, n, "head " + n);
    pick.value = h;
    pick.addEventListener("change", () => { S.focusHead = +pick.value; render(); });
    section.appendChild(el("p", { class: "hint" }, [
      "Layer " + layerName(g, l) + ", ", pick, ", query token " + i + " \u201c" + tokenText(g.query_tokens[i]) + "\u201d of " + g.name +
      ". Every number is recomputed here in float64 from the model's stored float32 q, k and v, " +
      "as npformer's attention_forward computes it."]));

    // The edits' controls are made once per view (re-making the slider would drop a drag in progress);
    // the steps below them are redrawn on each edit.
    const choices = scaleChoices(g, D);
    if (!choices.some((c) => c[0] === S.edit.scale)) S.edit.scale = "model";
    const scaleSel = el("select", { id: "step-scale" });
    for (const [value, , label] of choices) option(scaleSel, value, label);
    scaleSel.value = S.edit.scale;
    const slider = el("input", { type: "range", id: "step-alpha", min: ALPHA_LOG2.min, max: ALPHA_LOG2.max,
                                 step: ALPHA_LOG2.step });
    slider.value = Math.log2(S.edit.alpha);
    const alphaOut = el("output", { id: "step-alpha-value", for: "step-alpha" });
    const reset = el("button", { type: "button", id: "step-reset", text: "Back to the model's numbers" });
    // the row's largest weight and entropy: next to the controls, and read out when they change
    const stats = el("p", { id: "step-row-stats", role: "status" });
    function showAlpha() {
      alphaOut.textContent = "\u03b1 = " + S.edit.alpha.toFixed(2);
      alphaOut.dataset.value = String(S.edit.alpha);
      slider.setAttribute("aria-valuetext", "alpha " + S.edit.alpha.toFixed(2));
    }
    showAlpha();
    scaleSel.addEventListener("change", () => { S.edit.scale = scaleSel.value; fill(); });
    slider.addEventListener("input", () => { S.edit.alpha = Math.pow(2, +slider.value); showAlpha(); fill(); });
    reset.addEventListener("click", () => {
      S.edit.scale = "model"; S.edit.alpha = 1; delete S.edit.masks[maskKey(i)];
      scaleSel.value = "model"; slider.value = 0; showAlpha(); fill();
    });
    section.appendChild(el("div", { class: "panel", id: "step-edit" }, [
      el("p", { class: "hint", text: "Try the lesson's section 2, \u201c" + LESSON_SECTION_2 + "\u201d, on these numbers. " +
        "Without the scale, q\u00b7k grows like \u221ad (d = " + D + " here): the scores spread out and the softmax " +
        "collapses onto one key. Multiplying q by \u03b1 spreads the scores the same way. Click a mask cell (or Tab " +
        "to it and press Enter or Space) to let this query read that key or not. Numbers that now differ from the " +
        "model's are marked \u25b2 (higher) or \u25bc (lower); hover one for the model's value." }),
      el("div", { class: "edit-controls" }, [
        el("label", null, ["Scale ", scaleSel]), " ",
        el("label", null, ["Multiply q by \u03b1: 0.25 ", slider, " 8 "]), alphaOut, " ", reset]),
      stats]));
    const body = el("div", { id: "step-body" });
    section.appendChild(body);
    let numbers = null;

    // Redraw the steps; `focusKey` gives the focus back to that key's mask cell (a keyboard toggle).
    function fill(focusKey) {
      body.textContent = "";
      numbers = stepBody(body, stats, g, l, h, i, choices, fill);
      if (focusKey !== undefined) {
        const b = body.querySelector("button.mask-toggle[data-key='" + focusKey + "']");
        if (b) b.focus();
      }
    }
    fill();
    return () => numbers();
  }

  // Steps 1 to 5 of the step view, with the learner's edits, and the row's line in `stats`; returns
  // the view's numbers (a function).
  function stepBody(body, stats, g, l, h, i, choices, fill) {
    const H = g.n_heads, D = g.head_dim;
    const model = attentionRow(g, l, h, i, true);
    const Tk = model.Tk;
    const scale = choices.find((c) => c[0] === S.edit.scale)[1];
    const edited = S.edit.masks[maskKey(i)] || null;
    const row = attentionRow(g, l, h, i, true, { alpha: S.edit.alpha, scale: scale, allowed: edited });
    const bias = arr(g, "bias"), mask = arr(g, "mask");

    function vector(id, values, was, label) {
      const div = el("div", { class: "vector", id: id });
      values.forEach((x, d) => {
        const s = numCell("span", x);
        s.title = label + "[" + d + "]";
        markChange(s, x, was[d]);
        div.appendChild(s);
        div.appendChild(document.createTextNode(d + 1 < values.length ? ", " : ""));
      });
      return div;
    }
    function step(n, title, formula, parts) {
      const s = el("div", { class: "step", id: "step-" + n }, [
        el("h2", null, [n + ". " + title, el("span", { class: "formula", text: formula })])]);
      for (const b of parts) s.appendChild(b);
      body.appendChild(s);
    }
    step(1, "q, the query vector of token " + i, "q = x W_q (this head's " + D + " columns)" +
         (S.edit.alpha !== 1 ? ", \u00d7 \u03b1 = " + S.edit.alpha.toFixed(2) : ""),
         [vector("step-q", Array.from(row.q), model.q, "q")]);

    // one table for every key: k_j, q.k_j, times the scale, + bias, the mask, the softmax weight
    const k = arr(g, "k"), v = arr(g, "v");
    const kBase = (l * H + h) * Tk * D;
    const Dv = row.Dv, vBase = (l * H + h) * Tk * Dv;
    const table = el("table", { class: "num", id: "step-table" });
    const head = ["j", "key", "k_j", "q\u00b7k_j", "\u00d7 " + fmt(scale)];
    if (bias) head.push("+ bias");
    head.push("mask", "score", "softmax w_j", "v_j");
    table.appendChild(el("tr", null, head.map((t) => el("th", { text: t, class: t === "key" ? "tok" : "" }))));
    let sum = 0;
    for (let j = 0; j < Tk; j++) {
      const kj = k.data.subarray(kBase + j * D, kBase + (j + 1) * D);
      const vj = v.data.subarray(vBase + j * Dv, vBase + (j + 1) * Dv);
      const tr = el("tr", { "data-key": j, class: row.allowed[j] ? "" : "masked" }, [
        el("td", { text: String(j) }), el("td", { class: "tok", text: shortToken(g.key_tokens[j], 24) })]);
      tr.appendChild(el("td", { class: "vec k", text: preview(kj) }));
      const cells = [["dot", row.dot[j], model.dot[j]], ["scaled", row.scaled[j], model.scaled[j]]];
      for (const [cls, x, was] of cells) { const c = numCell("td", x, cls); markChange(c, x, was); tr.appendChild(c); }
      if (bias) tr.appendChild(numCell("td", bias.data[i * Tk + j], "bias"));
      // the mask cell: a toggle button; pressed means this query may read key j
      const toggle = el("button", { type: "button", class: "mask-toggle", "data-key": j,
                                    "aria-pressed": row.allowed[j] ? "true" : "false",
                                    "aria-label": "query " + i + " may read key " + j + " \u201c" + g.key_tokens[j] + "\u201d",
                                    text: row.allowed[j] ? "1" : "0 \u2192 -inf" });
      toggle.addEventListener("click", () => {
        const flags = Uint8Array.from(row.allowed);
        flags[j] = flags[j] ? 0 : 1;
        const same = flags.every((f, n) => f === model.allowed[n]);
        if (same) delete S.edit.masks[maskKey(i)]; else S.edit.masks[maskKey(i)] = flags;
        fill(j);
      });
      const mc = el("td", { class: "mask", "data-value": String(row.allowed[j]) }, [toggle]);
      markChange(mc, row.allowed[j], model.allowed[j]);
      tr.appendChild(mc);
      for (const [cls, x, was] of [["score", row.score[j], model.score[j]], ["weight", row.weights[j], model.weights[j]]]) {
        const c = numCell("td", x, cls);
        markChange(c, x, was);
        tr.appendChild(c);
      }
      tr.appendChild(el("td", { class: "vec v", text: preview(vj) }));
      table.appendChild(tr);
      sum += row.weights[j];
    }
    const total = el("tr", { class: "sum" }, [el("td", { text: "" }), el("td", { class: "tok", text: "sum" })]);
    for (let n = 0; n < head.length - 4; n++) total.appendChild(el("td", { text: "" }));
    const sc = numCell("td", sum);
    sc.id = "step-sum";
    total.appendChild(sc);
    total.appendChild(el("td", { text: "" }));
    table.appendChild(total);
    const nMasked = row.allowed.reduce((a, b) => a + (b ? 0 : 1), 0);
    step(2, "every k, and the scores", "q\u00b7k_j, then \u00d7 scale = " + scale.toPrecision(6) +
         (Math.abs(scale - 1 / Math.sqrt(D)) < 1e-9 ? " = 1/\u221a" + D : "") + (bias ? ", + bias" : ""), [
      el("p", { class: "hint", text: "The mask " + (mask || edited ? "forbids " + nMasked + " of " + Tk + " keys for this query; " +
        "their score becomes -inf and their weight 0." : "is empty: every key may be read.") +
        " Softmax: w_j = exp(score_j - max) / \u03a3 exp(score - max); the weights sum to 1 (last row)" +
        (nMasked === Tk ? ", or to 0 when no key may be read." : ".") }),
      el("div", { class: "scroll" }, [table])]);

    // the row in three numbers, against the model's
    const now = rowSummary(row), was = rowSummary(model);
    const said = (r) => "largest weight " + fmt(r.max) + " (key " + r.top + " \u201c" +
      shortToken(g.key_tokens[r.top], 24) + "\u201d), entropy " + fmt(r.entropy) + " nats" +
      (r.n > 1 ? " (" + (100 * r.share).toFixed(1) + "% of log " + r.n + ")" : "");
    const line = now.n === 0
      ? "No key may be read: every weight is 0 and the output is 0, never NaN (npformer's convention)."
      : "This row: " + said(now) + ", the scores' standard deviation " + fmt(now.std) +
        ". Entropy is in nats; log n, for the n = " + now.n +
        " keys this query may read, is its largest value (weights all equal) and 0 its smallest (one key takes all).";
    stats.textContent = line +
      (was.n && (S.edit.alpha !== 1 || edited || scale !== g.scale) ? " The model's row: " + said(was) + "." : "");
    stats.dataset.maxWeight = String(now.max);
    stats.dataset.entropy = String(now.entropy);
    stats.dataset.entropyShare = String(now.share);
    stats.dataset.scoreStd = String(now.std);

    // the weights as bars (the model's as outlines where they differ), the canvas this view exports
    const bw = Math.max(2, Math.min(24, Math.floor(900 / Tk)));
    const c = makeCanvas(Tk * bw + 40, 130);
    c.id = "step-canvas";
    const ctx = c._ctx;
    ctx.fillStyle = "#fff";
    ctx.fillRect(0, 0, Tk * bw + 40, 130);
    const wmax = Math.max(maxOf(row.weights), maxOf(model.weights), 1e-12);
    for (let j = 0; j < Tk; j++) {
      ctx.fillStyle = row.allowed[j] ? headColour(h) : "#ccc";
      const hh = 100 * row.weights[j] / wmax;
      ctx.fillRect(30 + j * bw, 110 - hh, bw - 1, hh);
      if (model.weights[j] !== row.weights[j]) {
        ctx.strokeStyle = "#1d232a";
        ctx.lineWidth = 1;
        const mh = 100 * model.weights[j] / wmax;
        ctx.strokeRect(30 + j * bw + 0.5, 110 - mh + 0.5, bw - 2, mh);
      }
    }
    ctx.fillStyle = "#5f6b76";
    ctx.font = "11px system-ui, sans-serif";
    ctx.fillText(fmt(wmax), 0, 12);
    ctx.fillText("softmax weights over the " + Tk + " keys", 30, 126);
    S.canvas = c;
    const outlined = row.weights.some((w, j) => w !== model.weights[j]);
    step(3, "softmax weights", "w = softmax(score)",
         outlined ? [c, el("p", { class: "hint", text: "Outlined: the model's weights." })] : [c]);
    step(4, "the weighted sum of the v's", "o = \u03a3_j w_j v_j", [vector("step-out", Array.from(row.out), model.out, "o")]);
    step(5, "the head's slice of the output", "columns " + h * Dv + " to " + ((h + 1) * Dv - 1) +
         " of the " + H + " heads' concatenated output, before out_proj", [
      el("p", { class: "hint", text: "The heads' outputs are concatenated side by side (" + H + " \u00d7 " + Dv + " = " + H * Dv +
        " numbers) and then mixed by out_proj; head " + h + " owns this slice:" }),
      vector("step-slice", Array.from(row.out), model.out, "out[" + h * Dv + "+d]")]);
    return () => ({ view: "step", group: g.name, layer: layerName(g, l), head: h, query: i, query_token: g.query_tokens[i],
                    scale: scale, model_scale: g.scale, alpha: S.edit.alpha, mask_edited: !!edited,
                    key_tokens: g.key_tokens, q: Array.from(row.q),
                    k: rowsOf(k.data.subarray(kBase, kBase + Tk * D), Tk, D),
                    v: rowsOf(v.data.subarray(vBase, vBase + Tk * Dv), Tk, Dv),
                    dot: Array.from(row.dot), scaled: Array.from(row.scaled), mask: Array.from(row.allowed),
                    score: Array.from(row.score, (x) => (isFinite(x) ? x : null)), weights: Array.from(row.weights),
                    model_weights: Array.from(model.weights), sum: sum, out: Array.from(row.out),
                    slice: [h * Dv, (h + 1) * Dv], max_weight: now.max, entropy_nats: now.entropy });
  }

  // The target an explanation is for, and the query row it is read at.
  function targets() { return input().targets || []; }
  // null: a target of the whole sequence (e.g. a mean-pooled embedding), explained by the mean of all rows.
  function targetRow(g) {
    const t = targets()[S.target];
    if (t && (!t.group || t.group === g.name)) return t.query === undefined ? S.query : t.query;
    return S.query;
  }
  // Row i of a (Tq, Tk) block of `data` starting at `off`, or the mean of its rows when i is null.
  function rowOf(data, off, Tq, Tk, i) {
    const out = new Float64Array(Tk);
    if (i !== null) { for (let j = 0; j < Tk; j++) out[j] = data[off + i * Tk + j]; return out; }
    for (let r = 0; r < Tq; r++) for (let j = 0; j < Tk; j++) out[j] += data[off + r * Tk + j] / Tq;
    return out;
  }
  function rowName(g, i) { return i === null ? "the mean of all query rows" : "query token " + i + " \u201c" + tokenText(g.query_tokens[i]) + "\u201d"; }

  // Bars over the key tokens, with their numbers: one per explanation.
  function barTable(id, title, values, g, note) {
    const box = el("div", { class: "panel", id: id }, [el("h2", { text: title })]);
    if (note) box.appendChild(el("p", { class: "hint", text: note }));
    if (!values) { box.appendChild(el("p", { class: "hint", text: "not available for this attention" })); return box; }
    const t = el("table", { class: "num bars" });
    t.appendChild(el("tr", null, [el("th", { class: "tok", text: "key" }), el("th", { text: "value" }), el("th", { text: "" })]));
    const mx = Math.max(maxOf(values), 1e-12);
    for (let j = 0; j < values.length; j++) {
      const tr = el("tr", { "data-key": j }, [el("td", { class: "tok", text: j + ": " + shortToken(g.key_tokens[j], 18) })]);
      tr.appendChild(numCell("td", values[j], "value"));
      const fill = el("div", { class: "fill" });
      fill.style.width = Math.max(0, 160 * values[j] / mx) + "px";
      tr.appendChild(el("td", { class: "bar" }, [fill]));
      t.appendChild(tr);
    }
    box.appendChild(el("div", { class: "scroll" }, [t]));
    return box;
  }

  // Raw attention of one query row at a layer, averaged over the chosen heads.
  function meanRow(g, l, i, heads) {
    const Tq = g.query_tokens.length, Tk = g.key_tokens.length;
    const out = new Float64Array(Tk);
    if (!heads.length) return out;
    for (const h of heads) {
      const r = rowOf(headWeights(g, l, h), 0, Tq, Tk, i);
      for (let j = 0; j < Tk; j++) out[j] += r[j] / heads.length;
    }
    return out;
  }
  function rolloutRow(g, i) {
    const R = arr(g, "rollout");
    if (!R) return null;
    const [L, Tq, Tk] = R.shape;
    const l = S.rolloutLayer < 0 ? L - 1 : Math.min(S.rolloutLayer, L - 1);
    return rowOf(R.data, l * Tq * Tk, Tq, Tk, i);
  }
  function relevanceRow(g, i) {
    const t = targets()[S.target];
    if (!g.relevance || !t || !g.relevance[t.name]) return null;
    if (!g._rel) g._rel = {};
    if (!g._rel[t.name]) g._rel[t.name] = decodeArray(g.relevance[t.name]);
    const R = g._rel[t.name];
    return rowOf(R.data, 0, R.shape[0], R.shape[1], i);
  }

  // A picker for the explanation's target.
  function targetPicker() {
    const pick = el("select", { id: "target-select" });
    let box = pick, at;
    targets().forEach((t, n) => {
      // a target with a position (the prediction and its alternatives there) sits in that position's group
      const where = t.chosen ? "chosen" : t.position;
      if (where !== undefined && where !== at) { box = pick.appendChild(el("optgroup", { label: where })); at = where; }
      option(box, n, t.name);
    });
    if (!targets().length) option(pick, 0, "query token " + S.query);
    pick.value = S.target;
    pick.addEventListener("change", () => {
      S.target = +pick.value;
      // a target is read in one attention group (the decoder's cross-attention for a translation): go there
      const t = targets()[S.target];
      const gi = t && t.group ? input().groups.findIndex((g) => g.name === t.group) : -1;
      if (gi >= 0 && gi !== S.group) { S.group = gi; $("group-select").value = gi; fillGroupControls(); }
      render();
    });
    return pick;
  }

  // 4.4 Explanations beyond raw attention: rollout and gradient-weighted relevance, next to raw
  // attention, for a chosen target (its query row).
  function explainView(section) {
    const g = group();
    const i = targetRow(g);
    const t = targets()[S.target];
    const heads = [...S.heads].sort((a, b) => a - b);
    const raw = meanRow(g, S.layer, i, heads);
    const roll = rolloutRow(g, i);
    const rel = relevanceRow(g, i);
    const R = arr(g, "rollout");
    const rl = R ? (S.rolloutLayer < 0 ? R.shape[0] - 1 : Math.min(S.rolloutLayer, R.shape[0] - 1)) : 0;
    const lp = el("select", { id: "rollout-layer" });
    if (R) for (let l = 0; l < R.shape[0]; l++) option(lp, l, "through layer " + layerName(g, l));
    lp.value = rl;
    lp.addEventListener("change", () => { S.rolloutLayer = +lp.value; render(); });
    section.appendChild(el("p", { class: "hint" }, [
      "Target ", targetPicker(), (t && t.detail ? " (" + t.detail + ")" : "") + ", read at " + rowName(g, i) +
      " of " + g.name + ". Raw attention: layer " + layerName(g, S.layer) +
      ", mean of heads " + heads.join(",") + ". Rollout (Abnar & Zuidema 2020): the layers' head-averaged attention " +
      "plus the residual, multiplied through ", lp, ". Relevance (Chefer, Gur & Wolf 2021): the gradient of the " +
      "target with respect to each attention map times the map, positive part, averaged over heads, propagated " +
      "through the layers; computed with npformer's own backward."]));
    const panels = [
      ["explain-raw", "raw attention", raw],
      ["explain-rollout", "rollout", roll],
      ["explain-relevance", "relevance", rel],
    ];
    const row = el("div", { class: "row" });
    const inp = input();
    const c = inp.image && g.key_tokens.some((_, j) => isImageKey(g, j)) ? makeCanvas(3 * 230, 250) : null;
    panels.forEach(([id, title, values], n) => {
      row.appendChild(barTable(id, title, values, g));
      if (c && values) drawOverlay(c._ctx, inp.image, g, values, n * 230, 20, 210, title);
    });
    if (c) {
      c.id = "explain-canvas";
      section.appendChild(el("p", { class: "hint" }, [stretchBox()]));
      section.appendChild(c);
    } else {
      // without an image, the three rows as a small heat strip, the canvas this view exports
      const Tk = g.key_tokens.length, cw = Math.max(2, Math.min(20, Math.floor(900 / Tk)));
      const strip = makeCanvas(110 + Tk * cw, 3 * 22 + 6);
      strip.id = "explain-canvas";
      const ctx = strip._ctx;
      ctx.fillStyle = "#fff";
      ctx.fillRect(0, 0, 110 + Tk * cw, 72);
      panels.forEach(([, title, values], n) => {
        ctx.fillStyle = "#1d232a";
        ctx.font = "12px system-ui, sans-serif";
        ctx.fillText(title, 2, n * 22 + 16);
        if (!values) return;
        const mx = Math.max(maxOf(values), 1e-12);
        for (let j = 0; j < Tk; j++) {
          const [r, gg, b] = heat(values[j] / mx);
          ctx.fillStyle = "rgb(" + r + "," + gg + "," + b + ")";
          ctx.fillRect(110 + j * cw, n * 22 + 2, cw, 20);
        }
      });
      section.appendChild(strip);
      S.canvas = strip;
    }
    if (c) S.canvas = c;
    section.appendChild(row);
    return { view: "explain", group: g.name, target: t ? t.name : null, query: i, layer: layerName(g, S.layer), heads: heads,
             rollout_layer: rl, key_tokens: g.key_tokens, raw: Array.from(raw), rollout: roll && Array.from(roll),
             relevance: rel && Array.from(rel) };
  }

  // "stretch": a checkbox for the views that tint patches
  function stretchBox() {
    const box = el("input", { type: "checkbox", id: "stretch" });
    box.checked = S.stretch;
    box.addEventListener("change", () => { S.stretch = box.checked; render(); });
    return el("label", null, [box, " stretch the tint to the largest patch"]);
  }

  // The input image, scaled up, with each patch tinted by its value (key tokens from
  // image.patch_token_offset, row-major over image.grid).
  function imageCanvas(image) {
    if (image._canvas) return image._canvas;
    const rgb = decodeArray(image.rgb);
    const [Hh, Ww] = rgb.shape;
    const c = document.createElement("canvas");
    c.width = Ww; c.height = Hh;
    const ctx = c.getContext("2d");
    const img = ctx.createImageData(Ww, Hh);
    for (let p = 0; p < Hh * Ww; p++) {
      img.data[4 * p] = rgb.data[3 * p]; img.data[4 * p + 1] = rgb.data[3 * p + 1];
      img.data[4 * p + 2] = rgb.data[3 * p + 2]; img.data[4 * p + 3] = 255;
    }
    ctx.putImageData(img, 0, 0);
    image._canvas = c;
    return c;
  }
  function drawOverlay(ctx, image, g, values, x, y, size, title) {
    const src = imageCanvas(image);
    const [rows, cols] = image.grid;
    const off = image.patch_token_offset;
    const scale = size / Math.max(src.width, src.height);
    const w = src.width * scale, h = src.height * scale;
    if (title) {
      ctx.fillStyle = "#1d232a";
      ctx.font = "13px system-ui, sans-serif";
      ctx.fillText(title, x, y - 6);
    }
    ctx.imageSmoothingEnabled = false;
    ctx.drawImage(src, x, y, w, h);
    // tint relative to the largest value of the whole row (words included), so that patches a token
    // hardly reads stay faint; "stretch" scales to the largest patch instead, to see their differences
    let mx = 1e-12;
    if (S.stretch) for (let p = 0; p < rows * cols; p++) mx = Math.max(mx, values[off + p] || 0);
    else for (let j = 0; j < values.length; j++) mx = Math.max(mx, values[j] || 0);
    const pw = w / cols, ph = h / rows;
    for (let r = 0; r < rows; r++) for (let cc = 0; cc < cols; cc++) {
      const v = (values[off + r * cols + cc] || 0) / mx;
      ctx.fillStyle = "rgba(255,70,0," + (0.8 * v).toFixed(3) + ")";
      ctx.fillRect(x + cc * pw, y + r * ph, pw, ph);
      ctx.strokeStyle = "rgba(255,255,255,0.25)";
      ctx.lineWidth = 0.5;
      ctx.strokeRect(x + cc * pw, y + r * ph, pw, ph);
    }
  }

  // 4.5 Image view: a query token's attention (or an explanation) over the image's patch grid, with
  // the words beside it (for the VLA: what the action tokens read in the scene and in the instruction).
  function imageView(section) {
    const g = group();
    const inp = input();
    const i = S.imageSource === "attention" ? S.query : targetRow(g);
    const heads = [...S.heads].sort((a, b) => a - b);
    const srcPick = el("select", { id: "image-source" });
    option(srcPick, "attention", "attention (layer " + layerName(g, S.layer) + ", chosen heads' mean)");
    if (g.rollout) option(srcPick, "rollout", "rollout");
    if (g.relevance) option(srcPick, "relevance", "relevance");
    srcPick.value = S.imageSource;
    srcPick.addEventListener("change", () => { S.imageSource = srcPick.value; render(); });
    const values = S.imageSource === "rollout" ? rolloutRow(g, i) : S.imageSource === "relevance" ? relevanceRow(g, i)
      : meanRow(g, S.layer, i, heads);
    section.appendChild(el("p", { class: "hint" }, [
      "Show ", srcPick, S.imageSource === "attention" ? "" : " for target ", S.imageSource === "attention" ? "" : targetPicker(),
      " of " + rowName(g, i) + ": each patch is tinted by the weight its key " +
      "token receives (relative to the row's largest weight); the words are listed beside it. ", stretchBox()]));
    const c = makeCanvas(340, 340);
    c.id = "image-canvas";
    const ctx = c._ctx;
    ctx.fillStyle = "#fff";
    ctx.fillRect(0, 0, 340, 340);
    if (values) drawOverlay(ctx, inp.image, g, values, 10, 24, 310, g.name + ", layer " + layerName(g, S.layer));
    S.canvas = c;
    // the non-patch key tokens (words, actions, specials) with their values
    const words = [];
    const kinds = (g.token_kinds && g.token_kinds.key) || [];
    if (values) g.key_tokens.forEach((t, j) => { if (!isImageKey(g, j) && kinds[j] !== "pad" && t !== "<pad>") words.push(j); });
    const wordVals = words.map((j) => values[j]);
    const table = barTable("image-words", "words", values ? wordVals : null,
      { key_tokens: words.map((j) => g.key_tokens[j]) });
    section.appendChild(el("div", { class: "row" }, [c, table]));
    const patches = [];
    if (values) {
      const off = inp.image.patch_token_offset, n = inp.image.grid[0] * inp.image.grid[1];
      for (let p = 0; p < n; p++) patches.push(values[off + p]);
    }
    return { view: "image", group: g.name, query: i, source: S.imageSource, grid: inp.image.grid,
             patches: patches, words: words.map((j, n) => [g.key_tokens[j], wordVals[n]]) };
  }

  // 4.6 Matrix view: one head's (or the chosen heads' mean) attention as a query x key matrix; for
  // the decoder's cross-attention this is the alignment, one row per output token written.
  function matrixView(section) {
    const g = viewGroup();
    const Tq = g.query_tokens.length, Tk = g.key_tokens.length;
    const heads = [...S.heads].sort((a, b) => a - b);
    const M = new Float32Array(Tq * Tk);
    for (const h of heads) { const W = headWeights(g, S.layer, h); for (let n = 0; n < M.length; n++) M[n] += W[n] / heads.length; }
    const cell = Math.max(2, Math.min(22, Math.floor(760 / Math.max(Tq, Tk))));
    const lab = cell >= 9 ? 110 : 10;
    const width = lab + Tk * cell + 10, height = lab + Tq * cell + 10;
    const c = makeCanvas(width, height);
    c.id = "matrix-canvas";
    const ctx = c._ctx;
    ctx.fillStyle = "#fff";
    ctx.fillRect(0, 0, width, height);
    drawMapExact(ctx, M, Tq, Tk, lab, lab, cell);
    if (lab > 10) {
      ctx.fillStyle = "#1d232a";
      ctx.font = Math.min(12, cell) + "px system-ui, sans-serif";
      ctx.textAlign = "right";
      ctx.textBaseline = "middle";
      for (let i = 0; i < Tq; i++) ctx.fillText(shortToken(g.query_tokens[i], 16), lab - 4, lab + i * cell + cell / 2);
      for (let j = 0; j < Tk; j++) {
        ctx.save();
        ctx.translate(lab + j * cell + cell / 2, lab - 4);
        ctx.rotate(-Math.PI / 2);
        ctx.textAlign = "left";
        ctx.fillText(shortToken(g.key_tokens[j], 16), 0, 0);
        ctx.restore();
      }
      ctx.textBaseline = "alphabetic";
      ctx.textAlign = "left";
    }
    const readout = el("div", { id: "matrix-readout", class: "hint", text: "Hover a cell to read its weight." });
    c.addEventListener("mousemove", (ev) => {
      const r = c.getBoundingClientRect();
      const i = Math.floor((ev.clientY - r.top - lab) / cell), j = Math.floor((ev.clientX - r.left - lab) / cell);
      if (i >= 0 && i < Tq && j >= 0 && j < Tk) {
        readout.textContent = tokenText(g.query_tokens[i]) + " \u2192 " + tokenText(g.key_tokens[j]) + ": " + fmt(M[i * Tk + j]);
      }
    });
    const cross = /cross/.test(g.name);
    section.appendChild(el("p", { class: "hint", text: (cross ? "Alignment: each row is an output token written, each column a source token; " : "") +
      "layer " + layerName(g, S.layer) + ", mean of heads " + heads.join(",") + ". Darker is more weight (scaled to 1)." }));
    section.appendChild(readout);
    section.appendChild(el("div", { class: "scroll" }, [c]));
    S.canvas = c;
    return () => ({ view: "matrix", group: g.name, layer: layerName(g, S.layer), heads: heads, query_tokens: g.query_tokens,
                    key_tokens: g.key_tokens, weights: rowsOf(M, Tq, Tk) });
  }

  // one rectangle per cell, for maps small enough to show every cell
  function drawMapExact(ctx, M, rows, cols, x, y, cell) {
    for (let i = 0; i < rows; i++) for (let j = 0; j < cols; j++) {
      const [r, g, b] = heat(M[i * cols + j]);
      ctx.fillStyle = "rgb(" + r + "," + g + "," + b + ")";
      ctx.fillRect(x + j * cell, y + i * cell, cell, cell);
    }
  }

  // 4.7 Over training: the attention of a fixed probe input saved at each evaluation; the slider
  // shows the heads forming.
  function trainingView(section) {
    const tr = S.payload.training;
    const W = tr._W || (tr._W = decodeArray(tr.weights));
    const [Sn, L, H, Tq, Tk] = W.shape;
    S.trainStep = Math.min(S.trainStep, Sn - 1);
    const slider = el("input", { type: "range", id: "train-slider", min: 0, max: Sn - 1, step: 1 });
    slider.value = S.trainStep;
    const label = el("span", { id: "train-step", text: "step " + tr.steps[S.trainStep] });
    section.appendChild(el("p", { class: "hint", text: "The probe input's " + tr.group + " attention, saved at each " +
      "evaluation while the model trained. Drag the slider from step " + tr.steps[0] + " to " + tr.steps[Sn - 1] + "." }));
    section.appendChild(el("div", null, [slider, " ", label]));
    const cell = Math.max(40, Math.min(80, Math.floor(900 / H) - 8)), pad = 8, left = 36, top = 22;
    const c = makeCanvas(left + H * (cell + pad), top + L * (cell + pad));
    c.id = "train-canvas";
    c.title = "click a map to enlarge it below";
    S.trainHead = { l: Math.min(S.trainHead.l, L - 1), h: Math.min(S.trainHead.h, H - 1) };
    // the chosen map enlarged, its axes labelled with the probe's tokens
    const side = Math.max(240, Math.min(480, 18 * Math.max(Tq, Tk))), zl = 90, zt = 8, zb = 44;
    const zoom = makeCanvas(zl + side + 8, zt + side + zb);
    zoom.id = "train-zoom";
    const caption = el("p", { class: "hint", id: "train-zoom-caption" });
    section.append(el("div", { class: "row" }, [c, el("div", null, [caption, zoom])]));
    S.canvas = c;
    // the (Tq x Tk) map of layer l, head h at saved step s: W is (S, L, H, Tq, Tk)
    const mapAt = (s, l, h) => {
      const off = (((s * L + l) * H + h) * Tq) * Tk;
      return W.data.subarray(off, off + Tq * Tk);
    };
    function drawZoom(s) {
      const { l, h } = S.trainHead, ctx = zoom._ctx, M = mapAt(s, l, h);
      const cw = side / Tk, ch = side / Tq;
      ctx.fillStyle = "#fff";
      ctx.fillRect(0, 0, zl + side + 8, zt + side + zb);
      drawMap(ctx, M, Tq, Tk, zl, zt, side, Math.max(maxOf(M), 1e-12));
      ctx.fillStyle = "#1d232a";
      ctx.font = "11px system-ui, sans-serif";
      ctx.textAlign = "right";
      if (ch >= 9) tr.query_tokens.forEach((t, i) => ctx.fillText(shortToken(t, 10), zl - 4, zt + (i + 0.5) * ch + 4));
      ctx.textAlign = "center";
      if (cw >= 9) tr.key_tokens.forEach((t, j) => ctx.fillText(shortToken(t, 2), zl + (j + 0.5) * cw, zt + side + 13));
      ctx.font = "600 12px system-ui, sans-serif";
      ctx.fillText("key token (read) \u2192", zl + side / 2, zt + side + 34);
      ctx.save();
      ctx.translate(12, zt + side / 2);
      ctx.rotate(-Math.PI / 2);
      ctx.fillText("query token (reading) \u2192", 0, 0);
      ctx.restore();
      ctx.textAlign = "left";
      caption.textContent = "Layer " + (tr.layers ? tr.layers[l] : l) + ", head " + h + " at step " + tr.steps[s] +
        ": each row is a query token, each column a key token it reads; darker is more weight (scaled to the " +
        "map's largest). Click another map to enlarge it.";
    }
    function draw() {
      const s = S.trainStep;
      label.textContent = "step " + tr.steps[s];
      drawHeadGrid(c._ctx, L, H, Tq, Tk, (l, h) => mapAt(s, l, h), cell, pad, left, top, tr.layers);
      drawZoom(s);
    }
    c.addEventListener("click", (ev) => {
      const box = c.getBoundingClientRect();
      const h = Math.floor((ev.clientX - box.left - left) / (cell + pad)), l = Math.floor((ev.clientY - box.top - top) / (cell + pad));
      if (l < 0 || l >= L || h < 0 || h >= H) return;
      S.trainHead = { l: l, h: h };
      drawZoom(S.trainStep);
    });
    slider.addEventListener("input", () => { S.trainStep = +slider.value; draw(); });
    draw();
    return () => ({ view: "training", step: tr.steps[S.trainStep], group: tr.group, query_tokens: tr.query_tokens,
                    enlarged: { layer: tr.layers ? tr.layers[S.trainHead.l] : S.trainHead.l, head: S.trainHead.h },
                    key_tokens: tr.key_tokens, weights: Array.from({ length: L }, (_, l) => Array.from({ length: H },
                      (_, h) => rowsOf(mapAt(S.trainStep, l, h), Tq, Tk))) });
  }

  // 4.8 Head statistics: entropy, mean attended distance, weight on the first token; sortable,
  // each row opens that head.
  function statsView(section) {
    const g = viewGroup();
    const st = g.stats;
    const cols = [["layer", "layer"], ["head", "head"], ["entropy", "entropy (nats)"], ["distance", "mean distance"], ["first", "first-token weight"]];
    const rows = [];
    for (let l = 0; l < g.n_layers; l++) for (let h = 0; h < g.n_heads; h++) {
      rows.push({ layer: l, head: h, entropy: st.entropy[l][h], distance: st.distance[l][h], first: st.first[l][h] });
    }
    const { key, dir } = S.sort;
    rows.sort((a, b) => dir * (a[key] - b[key]) || a.layer - b.layer || a.head - b.head);
    section.appendChild(el("p", { class: "hint", text: g.name + ": per head, the entropy of its attention rows, the mean " +
      "distance |i - j| it attends over, and the weight it puts on the first token, averaged over the query tokens. " +
      "Click a column to sort, a row to open that head." }));
    const t = el("table", { class: "num sortable", id: "stats-table" });
    const thr = el("tr");
    for (const [k, title] of cols) {
      const th = el("th", { "data-key": k, text: title + (k === key ? (dir > 0 ? " \u25b2" : " \u25bc") : "") });
      th.addEventListener("click", () => { S.sort = { key: k, dir: k === key ? -dir : 1 }; render(); });
      thr.appendChild(th);
    }
    t.appendChild(el("thead", null, [thr]));
    const body = el("tbody");
    for (const r of rows) {
      const tr = el("tr", { "data-layer": r.layer, "data-head": r.head });
      tr.appendChild(el("td", { text: String(layerName(g, r.layer)) }));
      const hc = el("td", { text: String(r.head) });
      hc.style.borderLeft = "4px solid " + headColour(r.head);
      tr.appendChild(hc);
      for (const k of ["entropy", "distance", "first"]) tr.appendChild(numCell("td", r[k], k));
      tr.addEventListener("click", () => openHead(r.layer, r.head, "head"));
      body.appendChild(tr);
    }
    t.appendChild(body);
    // the three statistics as layer x head grids, the canvas this view exports
    const cell = 18, gw = g.n_heads * cell, gh = g.n_layers * cell;
    const c = makeCanvas(3 * (gw + 30) + 10, gh + 30);
    c.id = "stats-canvas";
    const ctx = c._ctx;
    ctx.fillStyle = "#fff";
    ctx.fillRect(0, 0, c.width, c.height);
    ["entropy", "distance", "first"].forEach((k, n) => {
      const vals = st[k].flat();
      const mx = Math.max(...vals, 1e-12);
      ctx.fillStyle = "#1d232a";
      ctx.font = "12px system-ui, sans-serif";
      ctx.fillText(k, n * (gw + 30) + 5, 12);
      for (let l = 0; l < g.n_layers; l++) for (let h = 0; h < g.n_heads; h++) {
        const [r, gg, b] = heat(st[k][l][h] / mx);
        ctx.fillStyle = "rgb(" + r + "," + gg + "," + b + ")";
        ctx.fillRect(n * (gw + 30) + 5 + h * cell, 18 + l * cell, cell - 1, cell - 1);
      }
    });
    S.canvas = c;
    section.appendChild(el("div", { class: "row" }, [el("div", { class: "scroll" }, [t]), c]));
    return { view: "stats", group: g.name, sort: S.sort, rows: rows };
  }

  const VIEWS = { head: headView, model: modelView, step: stepView, explain: explainView, image: imageView,
                  matrix: matrixView, training: trainingView, stats: statsView };

  // Views written in their own files (render.py's _SCRIPTS, inlined after this one) come in through
  // window.npformerPage.addView: a tab, a section and a draw function like the ones above.
  const EXTRA_VIEWS = {};
  function addView(name, label, draw, available) {
    if (VIEWS[name]) throw new Error("view " + name + " exists already");
    const button = el("button", { text: label });
    button.dataset.view = name;
    button.addEventListener("click", () => setView(name));
    $("tabs").insertBefore(button, $("tabs").querySelector(".spacer"));
    $("views").appendChild(el("section", { id: "view-" + name, class: "view" }));
    VIEWS[name] = draw;
    EXTRA_VIEWS[name] = { available: available || (() => true) };
  }

  // ---------------------------------------------------------------------------------------------
  // 5. Export, the --serve form, start-up
  // ---------------------------------------------------------------------------------------------

  // A download of bytes made in the page: an object URL (blob:, in memory; nothing leaves the machine).
  function download(name, blob) {
    const url = URL.createObjectURL(blob);
    const a = el("a", { href: url, download: name });
    document.body.appendChild(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
  }
  function baseName() {
    const g = group();
    return "explore_" + S.view + "_" + g.name.replace(/\W+/g, "-") + "_L" + S.layer;
  }
  $("export-png").addEventListener("click", () => {
    if (S.canvas) S.canvas.toBlob((blob) => download(baseName() + ".png", blob), "image/png");
  });
  $("export-json").addEventListener("click", () => {
    // the view's numbers (views with large maps give a function, called only now); -inf as null
    const numbers = typeof S.numbers === "function" ? S.numbers() : S.numbers;
    const text = JSON.stringify(numbers, (k, v) => (typeof v === "number" && !isFinite(v) ? null : v));
    download(baseName() + ".json", new Blob([text], { type: "application/json" }));
  });

  function showError(message) {
    const box = $("error");
    box.textContent = message;
    box.hidden = !message;
  }

  // --serve: the server adds payload.serve = {api, max_input_chars, max_inputs, fields}; a file
  // opened from disk has none and shows no form.
  function setupServe() {
    const serve = S.payload.serve;
    const form = $("serve-form");
    form.hidden = !serve;
    if (!serve) return;
    const box = $("serve-fields");
    box.textContent = "";
    const n = Math.max(1, serve.max_inputs || 1);
    for (let k = 0; k < n; k++) {
      const span = el("span", { class: "serve-input", "data-index": k });
      for (const f of serve.fields) {
        const prev = S.payload.inputs[k] && S.payload.inputs[k].meta && S.payload.inputs[k].meta[f.name];
        const inputEl = el("input", { name: f.name, type: f.kind === "int" ? "number" : "text", "aria-label": f.label,
                                      placeholder: f.label + (n > 1 ? " " + (k + 1) : "") });
        // no maxLength: the server checks the length and its error is shown on the page
        if (f.kind !== "int") inputEl.title = "at most " + serve.max_input_chars + " characters";
        const start = k < S.payload.inputs.length ? (prev !== undefined && prev !== null ? prev :
          (f.kind === "int" || f.optional ? f.default : S.payload.inputs[k].label)) : (k === 0 ? f.default : "");
        inputEl.value = start === undefined || start === null ? "" : start;
        span.append(el("label", { text: f.label + " " }), inputEl, " ");
      }
      box.appendChild(span);
    }
  }
  $("serve-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const serve = S.payload.serve;
    const inputs = [];
    for (const span of document.querySelectorAll("#serve-fields .serve-input")) {
      const one = {};
      let empty = true;
      for (const f of serve.fields) {
        const v = span.querySelector("input[name='" + f.name + "']").value;
        // an optional field (the target) goes only when filled in, and alone makes no input
        if (f.optional) { if (v.trim()) one[f.name] = v; } else if (f.kind === "int") { if (v !== "") one[f.name] = parseInt(v, 10); }
        else { one[f.name] = v; if (v.trim()) empty = false; }
      }
      const needed = serve.fields.filter((f) => !f.optional);
      if (!empty || (needed.every((f) => f.kind === "int") && needed.some((f) => f.name in one))) inputs.push(one);
    }
    $("serve-status").textContent = "running the model\u2026";
    showError("");
    try {
      // the server's token came in this page's URL (?token=HEX); the API wants it back with each request
      const token = new URLSearchParams(location.search).get("token") || "";
      const res = await fetch(serve.api, { method: "POST", body: JSON.stringify({ inputs: inputs }),
                                           headers: { "Content-Type": "application/json",
                                                      "Authorization": "token " + token } });
      let body;
      try { body = await res.json(); } catch (e) { body = { error: "the server answered " + res.status + " without JSON" }; }
      if (!res.ok || body.error) {
        $("serve-status").textContent = "";
        showError(body.error || "the server answered " + res.status);
        return;
      }
      await unpackAll(body);
      $("serve-status").textContent = "";
      load(body);
    } catch (e) {
      $("serve-status").textContent = "";
      showError("could not reach the server: " + e.message);
    }
  });

  function summary() {
    const p = S.payload, m = p.model, inp = input();
    const parts = [m.kind + ": d_model " + m.d_model + ", " + m.n_heads + " heads of " + m.head_dim + ", " + m.norm + "-LN"];
    parts.push("input \u201c" + shortToken(inp.label, 120) + "\u201d \u2192 \u201c" + shortToken(inp.output, 120) + "\u201d");
    if (inp.meta) for (const k in inp.meta) parts.push(k + " " + inp.meta[k]);
    $("summary").textContent = parts.join(" \u00b7 ");
    // a text the tokenizer cut to the model's limit says so (INPUT.truncated)
    $("truncated").textContent = inp.truncated ? "Note: this input was " + inp.truncated.note + "." : "";
    $("truncated").hidden = !inp.truncated;
    $("notes").textContent = (p.notes || []).join(" \u00b7 ");
    document.title = p.title;
    $("title").textContent = p.title;
  }

  function load(payload) {
    if (payload.version !== 1) throw new Error("payload version " + payload.version + ", this page reads version 1");
    S.payload = payload;
    S.input = 0; S.group = 0; S.layer = 0; S.query = 0; S.target = 0; S.rolloutLayer = -1;
    S.selected = new Set(); S.hover = null; S.kindFilter = null;
    S.edit = { scale: "model", alpha: 1, masks: {} };
    S.heads = new Set([0]);
    S.headsAuto = true;                                  // the first layer's most focused head (autoHeads)
    if (payload.training) S.trainStep = payload.training.steps.length - 1;
    fillControls();
    setupServe();
    summary();
    setView(S.view);
  }

  $("input-select").addEventListener("change", (ev) => {
    S.input = +ev.target.value; S.group = Math.min(S.group, input().groups.length - 1); S.target = 0;
    fillControls(); summary(); render();
  });
  $("group-select").addEventListener("change", (ev) => { S.group = +ev.target.value; fillGroupControls(); render(); });
  $("layer-select").addEventListener("change", (ev) => { S.layer = +ev.target.value; render(); });
  $("query-select").addEventListener("change", (ev) => { S.query = +ev.target.value; render(); });
  $("threshold").addEventListener("change", (ev) => {
    const t = parseFloat(ev.target.value);
    S.threshold = Number.isFinite(t) ? Math.max(0, Math.min(1, t)) : 0.02;
    render();
  });
  for (const b of document.querySelectorAll("#tabs button[data-view]")) b.addEventListener("click", () => setView(b.dataset.view));

  window.addEventListener("error", (ev) => showError("The page failed: " + ev.message));

  // start: read the payload, draw the head view, and say when the page is ready (for the tests)
  async function start() {
    const t0 = performance.now();
    const payload = JSON.parse($("payload").textContent);
    const t1 = performance.now();
    await unpackAll(payload);
    const t2 = performance.now();
    load(payload);
    const t3 = performance.now();
    // performance.now() counts from the navigation's start, so ready_ms is "navigation to interactive"
    window.npformerExplore = { state: S, attentionRow: attentionRow, headWeights: headWeights,
                               timing: { script_start_ms: t0, parse_ms: t1 - t0, inflate_ms: t2 - t1,
                                         first_view_ms: t3 - t2, ready_ms: t3 } };
    document.body.dataset.ready = "1";
  }
  // what the scripts after this one may use (they run before start() finishes: it awaits the payload)
  window.npformerPage = { S: S, addView: addView, render: render, setView: setView, openHead: openHead,
                          hooks: HOOKS, viewGroup: viewGroup, layerName: layerName, maxOf: maxOf, rowsOf: rowsOf,
                          option: option, fillGroupControls: fillGroupControls, syncHeadBoxes: syncHeadBoxes,
                          input: input, group: group, el: el, makeCanvas: makeCanvas, keyboardCanvas: keyboardCanvas,
                          fmt: fmt, numCell: numCell, heat: heat, headColour: headColour, headWeights: headWeights,
                          shortToken: shortToken, tokenText: tokenText, decodeArray: decodeArray, arr: arr, download: download,
                          baseName: baseName, showError: showError, targets: targets, targetPicker: targetPicker,
                          meanRow: meanRow, rolloutRow: rolloutRow, relevanceRow: relevanceRow,
                          drawOverlay: drawOverlay, imageCanvas: imageCanvas };
  start().catch((e) => showError("The page failed to load its data: " + e.message));
})();
