"""Draws docs/figures/explore_episode.png: the explorer's Episode tab on a gripper run, taken in headless
chromium (Debian's, as the explorer's browser tests drive it). It writes the page of episode SEED (with
the perturbations unless --calm), walks the timeline by keyboard to STEP (Home, then Right), shows what
the dx token read in the last layer, and prints the page's size and how long writing it took. Run from
the repository's root:

    npformer train gripper --out runs/gripper
    python docs/figures/explore_episode.py runs/gripper [--seed 3] [--step 4] [--calm]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "explore")]
OUT = Path(__file__).with_name("explore_episode.png")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", metavar="RUN", help="a trained gripper run")
    ap.add_argument("--seed", type=int, default=3, help="the episode (default 3)")
    ap.add_argument("--step", type=int, default=4, help="the step shown, 1-based (default 4)")
    ap.add_argument("--calm", action="store_true", help="without the perturbations")
    args = ap.parse_args()
    from page_browser import Opened, browser_context

    from npformer.explore.payload import open_explorer
    from npformer.explore.render import render_html

    with tempfile.TemporaryDirectory() as tmp, browser_context() as ctx:
        page_file = Path(tmp) / "episode.html"
        t0 = time.perf_counter()
        payload = open_explorer(args.run).payload([{"seed": args.seed, "perturb": int(not args.calm)}])
        page_file.write_text(render_html(payload), encoding="utf-8")
        seconds = time.perf_counter() - t0
        ep = payload["episode"]
        print(f"episode {ep['seed']}: {ep['instruction']!r}, {ep['outcome']} after {ep['steps']} steps; "
              f"events {ep['events']}")
        print(f"page: {page_file.stat().st_size / 1e6:.2f} MB, written in {seconds:.2f} s (model load included)")
        page = ctx.new_page()
        page.set_viewport_size({"width": 1280, "height": 900})
        o = Opened(page).open(page_file.as_uri())
        layers = page.eval_on_selector_all("#layer-select option", "os => os.length")
        page.select_option("#layer-select", str(layers - 1))
        page.focus("#episode-timeline")
        page.keyboard.press("Home")
        for _ in range(min(args.step, ep["steps"]) - 1):
            page.keyboard.press("ArrowRight")
        print(page.inner_text("#episode-said"))
        box = page.locator("#view-episode").bounding_box()
        page.screenshot(path=str(OUT), full_page=True,
                        clip={"x": 0, "y": 0, "width": 1280, "height": box["y"] + box["height"] + 8})
        problems = o.errors + o.foreign_requests(("file://", "data:"))
    print(OUT)
    if problems:
        print("problems:", *problems, sep="\n  ")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
