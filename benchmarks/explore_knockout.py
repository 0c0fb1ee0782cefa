"""The knock-out view on the tabletop policy's default scene (scene 0, its made-up instruction), as
docs/explorer.md shows it: the screenshot docs/figures/explore_knockout.png, taken in headless chromium,
and for the pick and the place the Spearman correlation between the heads' attention and knock-out
rankings with the sentence the page writes from it.

    npformer train tabletop
    python benchmarks/explore_knockout.py runs/tabletop          # (--out DIR: where the PNG goes)
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "explore")]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", metavar="RUN", help="a trained tabletop run")
    ap.add_argument("--out", default=str(ROOT / "docs" / "figures"), metavar="DIR")
    args = ap.parse_args()
    import numpy as np
    from page_browser import Opened, browser_context

    from npformer.explore.payload import decode_array, open_explorer
    from npformer.explore.render import render_html

    payload = open_explorer(args.run).payload([{"seed": 0, "instruction": None}])
    inp = payload["inputs"][0]
    kg = inp["knockout"]["groups"]["self"]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    print(f"{inp['label']} -> {inp['output']}")
    problems: list[str] = []
    with tempfile.TemporaryDirectory() as tmp, browser_context() as ctx:
        page_file = Path(tmp) / "tabletop.html"
        page_file.write_text(render_html(payload), encoding="utf-8")
        page = ctx.new_page()
        page.set_viewport_size({"width": 1280, "height": 900})
        o = Opened(page).open(page_file.as_uri())
        o.click_tab("knockout")
        for k, t in enumerate(inp["targets"]):
            if t["rank"] != 0:
                continue
            page.select_option("#target-select", str(k))
            said = page.inner_text("#knockout-sentence")
            rho = kg["spearman"][k]
            n_heads = len(page.query_selector_all("#knockout-by-effect tbody tr"))
            print(f"{t['name']} (cell {t['id']}): Spearman rho = {rho:.2f} over {n_heads} heads")
            print(f"  the page: {said}")
            decision = decode_array(kg["decision"])[..., k]                       # (L, H)
            for layer, head in zip(*np.nonzero(decision != inp["knockout"]["full"]["decision"][k]), strict=True):
                print(f"  knocking out layer {layer}'s head {head} moves the {t['name']} "
                      f"to cell {decision[layer, head]}")
            if t["name"] == "pick":
                box = page.locator("#view-knockout").bounding_box()
                page.screenshot(path=str(out / "explore_knockout.png"), full_page=True,
                                clip={"x": 0, "y": 0, "width": 1280, "height": box["y"] + box["height"] + 8})
        problems = o.errors + o.foreign_requests(("file://", "data:"))
    print(out / "explore_knockout.png")
    if problems:
        print("problems:", *problems, sep="\n  ")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
