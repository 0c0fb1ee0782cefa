// npformer explore: "Export SVG" (issue 25). Every view draws its canvas through the 2D context that
// explore.js's makeCanvas hands it; here that context is wrapped so that each drawing call is also
// recorded, and the record is written out as SVG elements: rectangles as <rect>, lines and paths as
// <path>, labels as <text> (so papers and slides get vectors and real text). Only what is a bitmap on the
// canvas too (the input image, a heatmap drawn scaled down from its cells) becomes an <image>.
// Inlined after explore.js (render.py's _SCRIPTS); it plugs into window.npformerPage.hooks.
"use strict";

(function () {
  const P = window.npformerPage;
  const S = P.S;
  const NS = "http://www.w3.org/2000/svg";

  const num = (x) => String(Math.round(x * 100) / 100);
  function esc(t) {
    return String(t).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");
  }
  // a canvas colour ("#rrggbb" or "rgba(r, g, b, a)", as the context reports it) -> [rgb, opacity]
  function colour(c) {
    const m = /^rgba\(\s*([\d.]+)\s*,\s*([\d.]+)\s*,\s*([\d.]+)\s*,\s*([\d.]+)\s*\)$/.exec(String(c));
    return m ? ["rgb(" + m[1] + "," + m[2] + "," + m[3] + ")", +m[4]] : [String(c), 1];
  }
  // the affine matrix [a, b, c, d, e, f] (x' = a x + c y + e, y' = b x + d y + f)
  const IDENTITY = [1, 0, 0, 1, 0, 0];
  function mul(m, n) {
    return [m[0] * n[0] + m[2] * n[1], m[1] * n[0] + m[3] * n[1], m[0] * n[2] + m[2] * n[3],
            m[1] * n[2] + m[3] * n[3], m[0] * n[4] + m[2] * n[5] + m[4], m[1] * n[4] + m[3] * n[5] + m[5]];
  }
  const apply = (m, x, y) => [m[0] * x + m[2] * y + m[4], m[1] * x + m[3] * y + m[5]];
  const isIdentity = (m) => m.every((v, n) => v === IDENTITY[n]);

  // A Path2D that keeps its own moveTo/lineTo/closePath as SVG path data (numbers, joined on export).
  function recordedPath() {
    const p = new Path2D();
    const ops = [];
    const moveTo = p.moveTo.bind(p), lineTo = p.lineTo.bind(p), closePath = p.closePath.bind(p);
    p.moveTo = (x, y) => { ops.push("M", x, y); moveTo(x, y); };
    p.lineTo = (x, y) => { ops.push("L", x, y); lineTo(x, y); };
    p.closePath = () => { ops.push("Z"); closePath(); };
    p._svgPath = () => ops.map((o) => (typeof o === "number" ? num(o) : o)).join(" ");
    return p;
  }

  // The record of one canvas: its elements since the last time the whole canvas was cleared or painted.
  function Recorder(ctx, width, height) {
    this.ctx = ctx; this.width = width; this.height = height;
    this.items = []; this.m = IDENTITY; this.stack = []; this.path = []; this.dash = [];
  }
  Recorder.prototype.covers = function (x, y, w, h) {
    return isIdentity(this.m) && x <= 0 && y <= 0 && x + w >= this.width && y + h >= this.height;
  };
  Recorder.prototype.transform = function () {
    return isIdentity(this.m) ? "" : ' transform="matrix(' + this.m.map(num).join(" ") + ')"';
  };
  Recorder.prototype.paint = function (kind) {            // fill or stroke attributes from the context's state
    const c = this.ctx, alpha = c.globalAlpha;
    if (kind === "fill") {
      const [rgb, a] = colour(c.fillStyle);
      return ' fill="' + esc(rgb) + '"' + (a * alpha < 1 ? ' fill-opacity="' + num(a * alpha) + '"' : "");
    }
    const [rgb, a] = colour(c.strokeStyle);
    return ' fill="none" stroke="' + esc(rgb) + '" stroke-width="' + num(c.lineWidth) + '"' +
      (a * alpha < 1 ? ' stroke-opacity="' + num(a * alpha) + '"' : "") +
      (this.dash.length ? ' stroke-dasharray="' + this.dash.map(num).join(" ") + '"' : "");
  };
  Recorder.prototype.call = function (name, a) {
    const add = (s) => this.items.push(s);
    switch (name) {
      case "save": this.stack.push([this.m, this.dash]); break;
      case "restore": if (this.stack.length) [this.m, this.dash] = this.stack.pop(); break;
      case "translate": this.m = mul(this.m, [1, 0, 0, 1, a[0], a[1]]); break;
      case "scale": this.m = mul(this.m, [a[0], 0, 0, a[1], 0, 0]); break;
      case "rotate": this.m = mul(this.m, [Math.cos(a[0]), Math.sin(a[0]), -Math.sin(a[0]), Math.cos(a[0]), 0, 0]); break;
      case "setTransform": this.m = a.length >= 6 ? a.slice(0, 6) : IDENTITY; break;
      case "resetTransform": this.m = IDENTITY; break;
      case "setLineDash": this.dash = Array.from(a[0] || []); break;
      case "clearRect":
        if (this.covers(a[0], a[1], a[2], a[3])) this.items = [];
        else add('<rect x="' + num(a[0]) + '" y="' + num(a[1]) + '" width="' + num(a[2]) + '" height="' + num(a[3]) +
                 '" fill="#fff"' + this.transform() + "/>");
        break;
      case "fillRect":
        if (this.covers(a[0], a[1], a[2], a[3])) this.items = [];
        add('<rect x="' + num(a[0]) + '" y="' + num(a[1]) + '" width="' + num(a[2]) + '" height="' + num(a[3]) + '"' +
            this.paint("fill") + this.transform() + "/>");
        break;
      case "strokeRect":
        add('<rect x="' + num(a[0]) + '" y="' + num(a[1]) + '" width="' + num(a[2]) + '" height="' + num(a[3]) + '"' +
            this.paint("stroke") + this.transform() + "/>");
        break;
      case "fillText": case "strokeText": {
        const c = this.ctx;
        const f = /^(?:(italic|oblique)\s+)?(?:(normal|bold|bolder|lighter|\d{3})\s+)?([\d.]+)px\s+(.+)$/.exec(c.font) || [];
        const anchor = { center: "middle", right: "end", end: "end" }[c.textAlign] || "start";
        const base = { middle: "middle", top: "hanging", hanging: "hanging", bottom: "text-after-edge" }[c.textBaseline];
        add('<text x="' + num(a[1]) + '" y="' + num(a[2]) + '" font-size="' + (f[3] || 10) + '" font-family="' +
            esc(f[4] || "sans-serif") + '"' + (f[2] && f[2] !== "normal" ? ' font-weight="' + f[2] + '"' : "") +
            (anchor !== "start" ? ' text-anchor="' + anchor + '"' : "") +
            (base ? ' dominant-baseline="' + base + '"' : "") + this.paint(name === "fillText" ? "fill" : "stroke") +
            this.transform() + ">" + esc(a[0]) + "</text>");
        break;
      }
      // the context's own path, its points mapped through the transform when given (as the canvas does)
      case "beginPath": this.path = []; break;
      case "moveTo": case "lineTo": {
        const [x, y] = apply(this.m, a[0], a[1]);
        this.path.push((name === "moveTo" ? "M" : "L") + num(x) + " " + num(y));
        break;
      }
      case "rect": {
        const pts = [[a[0], a[1]], [a[0] + a[2], a[1]], [a[0] + a[2], a[1] + a[3]], [a[0], a[1] + a[3]]]
          .map(([x, y]) => apply(this.m, x, y));
        this.path.push(pts.map(([x, y], n) => (n ? "L" : "M") + num(x) + " " + num(y)).join(" ") + " Z");
        break;
      }
      case "arc": {                                          // as 48 segments a full turn
        const [cx, cy, r, a0, a1, ccw] = a;
        let span = a1 - a0;
        if (ccw) span = span <= 0 ? span : span - 2 * Math.PI * Math.ceil(span / (2 * Math.PI));
        else span = span >= 0 ? Math.min(span, 2 * Math.PI) : span + 2 * Math.PI * Math.ceil(-span / (2 * Math.PI));
        const n = Math.max(2, Math.ceil(48 * Math.abs(span) / (2 * Math.PI)));
        for (let k = 0; k <= n; k++) {
          const t = a0 + span * k / n;
          const [x, y] = apply(this.m, cx + r * Math.cos(t), cy + r * Math.sin(t));
          this.path.push((k === 0 && !this.path.length ? "M" : "L") + num(x) + " " + num(y));
        }
        break;
      }
      case "closePath": this.path.push("Z"); break;
      case "fill": case "stroke": {
        const given = a[0] && a[0]._svgPath;
        const d = given ? a[0]._svgPath() : this.path.join(" ");
        if (d) add('<path d="' + d + '"' + this.paint(name) + (given ? this.transform() : "") + "/>");
        break;
      }
      case "drawImage": {                                    // a bitmap on the canvas stays one in the SVG
        const src = a[0];
        const [x, y, w, h] = a.length >= 9 ? [a[5], a[6], a[7], a[8]] : a.length >= 5 ? [a[1], a[2], a[3], a[4]]
          : [a[1], a[2], src.width, src.height];
        let url = "";
        try { url = src.toDataURL ? src.toDataURL("image/png") : ""; } catch (e) { url = ""; }
        if (url) add('<image x="' + num(x) + '" y="' + num(y) + '" width="' + num(w) + '" height="' + num(h) +
                     '" preserveAspectRatio="none" style="image-rendering:pixelated" xlink:href="' + url + '"' +
                     this.transform() + "/>");
        break;
      }
      default: break;
    }
  };
  Recorder.prototype.svg = function () {
    return '<?xml version="1.0" encoding="UTF-8"?>\n<svg xmlns="' + NS + '" xmlns:xlink="http://www.w3.org/1999/xlink" ' +
      'width="' + num(this.width) + '" height="' + num(this.height) + '" viewBox="0 0 ' + num(this.width) + " " +
      num(this.height) + '">\n' + this.items.join("\n") + "\n</svg>\n";
  };

  // The context a view draws with: every call goes to the canvas and into the record.
  function wrapContext(ctx, width, height) {
    const rec = new Recorder(ctx, width, height);
    return new Proxy(ctx, {
      get(target, prop) {
        if (prop === "_svgRecorder") return rec;
        const v = target[prop];
        if (typeof v !== "function") return v;
        return function (...args) { rec.call(prop, args); return v.apply(target, args); };
      },
      set(target, prop, value) { target[prop] = value; return true; },
    });
  }
  P.hooks.wrapContext = wrapContext;
  P.hooks.newPath = recordedPath;

  // The current view's drawing as SVG text (null when the view has no canvas).
  function currentSvg() {
    const rec = S.canvas && S.canvas._ctx && S.canvas._ctx._svgRecorder;
    return rec ? rec.svg() : null;
  }
  document.getElementById("export-svg").addEventListener("click", () => {
    const text = currentSvg();
    if (text) P.download(P.baseName() + ".svg", new Blob([text], { type: "image/svg+xml" }));
  });
  window.npformerSvg = { currentSvg: currentSvg };
})();
