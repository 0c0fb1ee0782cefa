"""The knock-outs' memory and work are bounded by the input, not by the shape a small file claims (issue 31):
two GPT-2 directories of a few MB at tiny widths, each explored in a child process under an address-space
limit (``resource.setrlimit``, OPENBLAS_NUM_THREADS=1) and a time limit:
- wide, through a ``--serve`` request: a vocabulary of 50,257, 64 heads and a prompt of about 160 tokens.
  Keeping every knocked-out copy's (positions x vocabulary) logits needs 64 x 168 x 50,257 float32, over
  2 GB; only the explained steps are measured, so the child's peak stays far below that;
- deep, through the command line: 256 layers of 32 heads. Knocking out all 8,192 heads is minutes of
  forwards; the work budget (knockout.WORK_BUDGET, heads x positions x layers) stops them, and the payload
  says which heads were skipped and why. The child lowers the budget to ``DEEP_BUDGET`` so that the test
  stays fast; the budget's own size is docs/explorer.md's."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from gpt2_dirs import write_plain_gpt2

from npformer.explore.payload import decode_array

ROOT = Path(__file__).resolve().parents[2]
AS_LIMIT = 1536 << 20              # bytes of address space the child may map: the interpreter, numpy, the model
PEAK_MB = 600                      # the child's ru_maxrss bound; the wide model's kept logits alone would be 2 GB
TIME_LIMIT = 90                    # seconds; all 8,192 knock-outs of the deep model take minutes
DEEP_BUDGET = 1 << 14              # the deep child's work budget: a few heads' knock-outs
WIDE_PROMPT = " ".join(["the cat sat on the mat and then it ran far"] * 20)[:600]

CHILD = r"""
import json, resource, sys, time
resource.setrlimit(resource.RLIMIT_AS, (AS_LIMIT, AS_LIMIT))
from npformer.explore import knockout
how, model, prompt, out = sys.argv[1:5]
t = time.perf_counter()
if how == "serve":
    from npformer.explore.payload import open_explorer
    from npformer.explore.serve import ExploreServer
    srv = ExploreServer(open_explorer(model), [{"text": "a"}], port=0)     # the first page: a one-token prompt
    status, body = srv.answer(json.dumps({"inputs": [{"text": prompt}]}).encode())
    srv.server_close()
    with open(out, "wb") as f:
        f.write(body)
    result = status
else:
    from npformer.cli import main
    knockout.WORK_BUDGET = int(sys.argv[5])
    result = main(["explore", model, prompt, "--out", out])
try:        # this process's own peak: ru_maxrss would also count the parent's, inherited through fork
    with open("/proc/self/status") as f:
        peak = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 1024
except OSError:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (1 << 20 if sys.platform == "darwin" else 1024)
print(json.dumps({"result": result, "seconds": time.perf_counter() - t, "peak_mb": peak}))
""".replace("AS_LIMIT", str(AS_LIMIT))


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    base = tmp_path_factory.mktemp("knockout_bounds")
    return {"wide": write_plain_gpt2(base / "wide", n_embd=64, n_layer=4, n_head=16, vocab_size=50257),
            "deep": write_plain_gpt2(base / "deep", n_embd=32, n_layer=256, n_head=32, vocab_size=400)}


def explore_in_child(*args) -> dict:
    # the NumPy kernels: the bound is on what the page keeps; a compiled twin's first call would add its
    # runtime (numba and LLVM, about 150 MB once per process) to the peak, whatever the input
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", NPFORMER_KERNELS="numpy", PYTHONPATH=str(ROOT / "src"))
    try:
        proc = subprocess.run([sys.executable, "-c", CHILD, *map(str, args)], env=env,
                              capture_output=True, text=True, timeout=TIME_LIMIT)
    except subprocess.TimeoutExpired:
        pytest.fail(f"exploring {Path(args[1]).name} took more than {TIME_LIMIT} s")
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_wide_vocabulary_and_a_long_prompt_keep_only_what_is_measured(dirs, tmp_path):
    assert sum(f.stat().st_size for f in dirs["wide"].iterdir()) < 20e6          # a small directory
    got = explore_in_child("serve", dirs["wide"], WIDE_PROMPT, tmp_path / "answer.json")
    assert got["result"] == 200, (tmp_path / "answer.json").read_text()[:500]
    assert got["peak_mb"] < PEAK_MB, got
    inp = json.loads((tmp_path / "answer.json").read_text())["inputs"][0]
    assert inp["meta"]["prompt tokens"] > 150
    kn = inp["knockout"]
    assert kn["skipped"] is None                                       # 64 heads x 168 x 4: inside the budget
    assert np.isfinite(decode_array(kn["groups"]["self"]["effect"])).all()


def test_a_deep_stack_stops_at_the_work_budget_and_says_which_heads_it_skipped(dirs, tmp_path):
    page = tmp_path / "deep.html"
    got = explore_in_child("cli", dirs["deep"], "the cat sat on", page, DEEP_BUDGET)
    assert got["result"] == 0 and got["peak_mb"] < PEAK_MB, got
    html = page.read_text(encoding="utf-8")
    inp = json.loads(html.split('id="payload">', 1)[1].split("</script>", 1)[0])["inputs"][0]
    n_layers, n_heads, total = 256, 32, 256 * 32
    per_head = len(inp["groups"][0]["query_tokens"]) * n_layers           # positions read x layers
    done = DEEP_BUDGET // per_head                                       # heads that fit, knocked out in order
    assert 0 < done < n_heads
    sk = inp["knockout"]["skipped"]
    assert {k: sk[k] for k in ("count", "total", "first", "work_per_head", "budget")} == {
        "count": total - done, "total": total, "first": {"group": "self", "layer": 0, "head": done},
        "work_per_head": per_head, "budget": DEEP_BUDGET}
    assert sk["note"].startswith(f"{total - done:,} of the {total:,} heads were not knocked out, "
                                 f"from self L0\u00b7H{done} on")
    assert f"stop at {DEEP_BUDGET:,} head x position x layer units" in sk["note"]
    kg = inp["knockout"]["groups"]["self"]
    effect = decode_array(kg["effect"]).reshape(total, -1)              # (L*H, K), in knock-out order
    assert np.isfinite(effect[:done]).all() and np.isnan(effect[done:]).all()
    assert (decode_array(kg["decision"]).reshape(total, -1)[done:] == -1).all()
