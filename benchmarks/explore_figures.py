"""The explorer's screenshots for docs/explorer.md and the README's tour: docs/figures/explore_head.png (the head view),
explore_step.png (the step view) and explore_tabletop.png (attention, rollout and relevance over the
tabletop scene), taken in headless chromium from real trained runs.

    npformer train dates --out runs/dates && npformer train tabletop --out runs/tabletop
    .venv/bin/python benchmarks/explore_figures.py --dates runs/dates --tabletop runs/tabletop

Options: --out DIR (default docs/figures), --date "TEXT" (the dates input), --head H (the tabletop
head shown, in the last layer; pick one that reads the scene).
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "explore")]


def clip_to(page, selectors: list[str], pad: int = 8) -> dict:
    """The page rectangle that holds every element of ``selectors`` (and the header above them)."""
    boxes = [page.locator(s).first.bounding_box() for s in selectors]
    x0 = min(b["x"] for b in boxes) - pad
    y0 = min(b["y"] for b in boxes) - pad
    x1 = max(b["x"] + b["width"] for b in boxes) + pad
    y1 = max(b["y"] + b["height"] for b in boxes) + pad
    return {"x": max(0, x0), "y": max(0, y0), "width": x1 - max(0, x0), "height": y1 - max(0, y0)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dates", required=True, metavar="RUN", help="a trained dates run")
    ap.add_argument("--tabletop", required=True, metavar="RUN", help="a trained tabletop run")
    ap.add_argument("--date", default="29 November 2026", help="the dates input")
    ap.add_argument("--head", type=int, default=1, help="tabletop: the head shown (last layer)")
    ap.add_argument("--out", default=str(ROOT / "docs" / "figures"), metavar="DIR")
    args = ap.parse_args()
    from page_browser import Opened, browser_context

    from npformer.explore.payload import open_explorer
    from npformer.explore.render import render_html

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp, browser_context() as ctx:
        dates = Path(tmp) / "dates.html"
        dates.write_text(render_html(open_explorer(args.dates).payload([{"text": args.date}])), encoding="utf-8")
        table = Path(tmp) / "tabletop.html"
        table.write_text(render_html(open_explorer(args.tabletop).payload([{"seed": 2, "instruction": None}])),
                         encoding="utf-8")
        page = ctx.new_page()
        page.set_viewport_size({"width": 1280, "height": 1400})
        o = Opened(page).open(dates.as_uri())
        # head view: the decoder's cross-attention, last layer, every head, the threshold at 0.05
        groups = page.eval_on_selector_all("#group-select option", "os => os.map(o => o.textContent)")
        page.select_option("#group-select", str(groups.index("decoder cross")))
        layers = page.eval_on_selector_all("#layer-select option", "os => os.length")
        page.select_option("#layer-select", str(layers - 1))
        page.fill("#threshold", "0.05")
        page.dispatch_event("#threshold", "change")
        page.screenshot(path=str(out / "explore_head.png"), clip=clip_to(page, ["header", "#controls", "#head-canvas"]))
        # step view: the same group, head 0, the third output token
        page.select_option("#query-select", "2")
        o.click_tab("step")
        page.screenshot(path=str(out / "explore_step.png"),
                        clip=clip_to(page, ["header", "#step-1", "#step-2", "#step-3", "#step-5"]))
        # tabletop: what the pick action reads in the scene and in the instruction (last layer, one head)
        o2 = Opened(page).open(table.as_uri())
        layers = page.eval_on_selector_all("#layer-select option", "os => os.length")
        page.select_option("#layer-select", str(layers - 1))
        page.click("#heads-none")
        page.click(f"#head-boxes input[data-head='{args.head}']")
        page.select_option("#query-select", "0")
        o2.click_tab("image")
        page.screenshot(path=str(out / "explore_tabletop.png"), clip=clip_to(page, ["header", "#view-image"]))
        problems = o.errors + o2.errors + o.foreign_requests(("file://", "data:")) + o2.foreign_requests(("file://",))
        for name in ("explore_head.png", "explore_step.png", "explore_tabletop.png"):
            print(out / name)
    if problems:
        print("problems:", *problems, sep="\n  ")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
