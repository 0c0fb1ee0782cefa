"""How the compiled twins are chosen, loaded, compiled and run beside other threads and forks:
numba is not imported by ``import npformer`` nor by ``npformer --help``; a bad NPFORMER_KERNELS is one
line and exit 2; no writable cache directory means one warning and a working kernel; twins from other
threads, a MiniLM encoding on 2 threads and ``learn check``'s fork after a twin ran."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from npformer import ops
from npformer.ops import kernels, parallel

SRC = Path(__file__).resolve().parents[2] / "src"


def _numba():
    if kernels.numba_module() is None:
        if os.environ.get("CI") == "true":
            pytest.fail("numba is missing under CI: install npformer[fast]")
        pytest.skip("numba is not installed (pip install 'npformer[fast]')")


def _python(code: str, env: dict | None = None, src: Path = SRC, timeout: float = 120) -> subprocess.CompletedProcess:
    e = {k: v for k, v in os.environ.items() if k != "NPFORMER_KERNELS"}
    e.update({"PYTHONPATH": str(src)}, **(env or {}))
    return subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True, timeout=timeout)


def test_import_and_help_do_not_import_numba():
    r = _python("import sys, npformer, npformer.ops\n"
                "assert 'numba' not in sys.modules, 'import npformer'\n"
                "from npformer.cli import main\n"
                "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
                "assert 'numba' not in sys.modules, 'npformer --help'\nprint('ok')")
    assert r.returncode == 0 and r.stdout.endswith("ok\n"), r.stderr


def test_adam_takes_its_twin_on_small_parameters_once_numba_is_loaded():
    """On auto, small parameters' Adam runs the reference while numba is not loaded (and loads nothing), and
    the twin once a large array has loaded it, with the reference's bits; in a fresh interpreter."""
    _numba()
    r = _python(
        "import sys, numpy as np\n"
        "from npformer import ops\nfrom npformer.ops import kernels\nfrom npformer.train import Adam\n"
        "rng = np.random.default_rng(0)\n"
        "p0 = {'w': rng.standard_normal((30, 7)).astype(np.float32), 'b': rng.standard_normal(7).astype(np.float32)}\n"
        "gs = [{k: rng.standard_normal(v.shape).astype(np.float32) for k, v in p0.items()} for _ in range(3)]\n"
        "def train():\n"
        "    p = {k: v.copy() for k, v in p0.items()}\n"
        "    o = Adam(p, lr=1e-2, weight_decay=0.1)\n"
        "    for g in gs:\n        o.step(g)\n"
        "    return p, o\n"
        "ref, o_ref = train()\n"
        "assert kernels.kernels_used()['adam'] == 'numpy' and 'numba' not in sys.modules\n"
        "ops.layernorm_forward(np.ones((512, 512), np.float32), np.ones(512, np.float32), np.zeros(512, np.float32))\n"
        "assert 'numba' in sys.modules\n"
        "twin, o_twin = train()\n"
        "assert kernels.kernels_used()['adam'] == 'numba'\n"
        "for k in p0:\n"
        "    assert np.array_equal(twin[k], ref[k]) and np.array_equal(o_twin.m[k], o_ref.m[k]), k\n"
        "    assert np.array_equal(o_twin.v[k], o_ref.v[k]), k\n"
        "print('ok')", env={"NPFORMER_KERNELS": "auto"})
    assert r.returncode == 0 and r.stdout.endswith("ok\n"), r.stderr


def test_a_bad_kernels_value_is_one_line_and_exit_2():
    r = _python("from npformer.cli import main; raise SystemExit(main(['info']))", {"NPFORMER_KERNELS": "fast"})
    assert r.returncode == 2
    assert r.stderr == "npformer info: error: NPFORMER_KERNELS must be one of auto, numba, numpy, got 'fast'\n"


def test_info_names_the_kernels(capsys, monkeypatch):
    from npformer.cli import main
    from npformer.cli.info import _kernels_text
    with ops.use_kernels("numpy"):
        assert _kernels_text(kernels.describe()) == "numpy (the NumPy references; numba not used)"
    monkeypatch.delenv("NPFORMER_KERNELS", raising=False)
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    if kernels.numba_module() is not None:
        assert ("kernels: auto (compiled twins on arrays of 131,072+ elements: adam (any size once numba is loaded), "
                "cross_entropy_backward "
                "(float32), cross_entropy_forward (float32), dropout_add_forward, dropout_forward, "
                "embedding_backward, gelu_backward "
                "(float32), gelu_forward (float32), gelu_inference_ (float32), gelu_tanh_backward (float32), "
                "gelu_tanh_forward (float32), layernorm_backward, layernorm_forward, layernorm_inference, "
                "softmax_backward (float32), softmax_forward (float32)); "
                "numba 0.") in out and " thread(s)" in out, out
    else:
        assert "kernels: auto (the NumPy references: numba is not installed)" in out, out


def test_no_writable_cache_directory_compiles_without_one_and_warns_once(tmp_path):
    _numba()
    copy = tmp_path / "src"
    shutil.copytree(SRC / "npformer", copy / "npformer", ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "npformer" / "ops" / "fused" / "__pycache__").write_text("a file where the cache folder would go")
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    r = _python("import warnings, numpy as np\nwarnings.simplefilter('always')\nfrom npformer import ops\n"
                "with ops.use_kernels('numba'):\n"
                "    y, c = ops.layernorm_forward(np.ones((2, 3)), np.ones(3), np.zeros(3))\n"
                "    ops.layernorm_backward(y, c)\n"
                "    ops.softmax_forward(np.ones((2, 3), np.float32))\n"   # the twins that share fused/_simd.py
                "print(ops.kernels_used()['layernorm_backward'], ops.kernels_used()['softmax_forward'])",
                {"NUMBA_CACHE_DIR": str(blocker / "cache"), "XDG_CACHE_HOME": str(blocker / "xdg"),
                 "HOME": str(blocker / "home"), "PYTHONDONTWRITEBYTECODE": "1"}, src=copy)
    assert r.returncode == 0 and r.stdout == "numba numba\n", r.stderr
    assert r.stderr.count("numba kernels compile without a cache") == 1, r.stderr


def test_a_kernel_called_first_on_two_threads_imports_numba_and_warns_nothing():
    """A fused module's kernel called before any op asked ``kernels.twins`` (so before numba was imported),
    on 2 numba threads, from the main thread and another: no error and no warning (every kernel has a
    parallel loop, so its parallel compilation has something to parallelize)."""
    _numba()
    r = _python("import threading, warnings, numpy as np\nwarnings.simplefilter('error')\n"
                "from npformer.ops import parallel, dropout as ref\nfrom npformer.ops.fused import dropout as fused\n"
                "def run(out):\n    with parallel.limit(2):\n        out.append(fused.block_states(99, 5))\n"
                "got = []\nrun(got)\nt = threading.Thread(target=run, args=(got,))\nt.start()\nt.join()\n"
                "print(all(np.array_equal(g, ref.block_states(99, 5)) for g in got), len(got))")
    assert r.returncode == 0 and r.stdout == "True 2\n", r.stderr


def test_twins_from_two_threads_at_once_match_the_main_thread():
    """Threads other than the main one run serial compilations unless the layer is thread-safe; either
    way two threads asking for 2 numba threads each get the main thread's bits."""
    _numba()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((400, 48)).astype(np.float32)
    w, b = np.ones(48, np.float32), np.zeros(48, np.float32)

    def work():
        with parallel.limit(2):
            y, c = ops.layernorm_forward(x, w, b)
            return (y, *ops.layernorm_backward(x, c))

    with ops.use_kernels("numba"):
        want = work()
        out, errors = {}, []

        def run(i):
            try:
                for _ in range(5):
                    out[i] = work()
            except BaseException as e:        # reaches the assert below
                errors.append(e)

        threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    assert not errors and len(out) == 2, errors
    for got in out.values():
        for a, c in zip(got, want, strict=True):
            assert np.array_equal(a, c)
    assert kernels.threading_layer()             # named: the layer in use, or not started


def test_minilm_encoding_with_twins_on_two_threads():
    _numba()
    from npformer.pretrained import SentenceEncoder
    from oracles import minilm_dir
    enc = SentenceEncoder.load(minilm_dir())
    texts = [f"sentence number {i} about cats and dogs" + " very" * (i % 7) for i in range(12)]
    with ops.use_kernels("numpy"):
        want = enc.encode(texts, batch_size=4, threads=1)
    with ops.use_kernels("numba"), parallel.limit(2):
        ops.layernorm_forward(np.ones((2, 3)), np.ones(3), np.zeros(3))    # a twin has run in this process
        got = enc.encode(texts, batch_size=4, threads=2)
    assert np.linalg.norm(got - want) <= 1e-5 * np.linalg.norm(want)


def test_learn_check_forks_after_a_twin_ran_in_the_parent():
    """A twin's parallel pool started in the parent does not follow into learn check's forked child:
    the child runs serial kernels, and grades."""
    _numba()
    from right_solutions import loops_softmax

    from npformer.learn import check
    x = np.random.default_rng(1).standard_normal((64, 40)).astype(np.float32)
    with ops.use_kernels("numba"), parallel.limit(2):
        ops.layernorm_forward(x, np.ones(40, np.float32), np.zeros(40, np.float32))   # a parallel kernel ran
        report = check("softmax", loops_softmax, timeout=60)
    assert [r.status for r in report.rows] == ["pass"], report


def test_the_grader_grades_against_the_float64_references():
    """Every exercise's expected outputs are float64, and the twins' float64 values are the
    references' within 1e-12: the grade does not depend on the kernels."""
    _numba()
    from npformer.learn import exercises
    specs = {k: v for k, v in vars(exercises).items() if isinstance(v, exercises.Spec)}
    assert len(specs) >= 5
    for name, spec in specs.items():
        for dtype in spec.dtypes:
            dt = np.dtype(dtype) if dtype is not None else None
            with ops.use_kernels("numpy"):
                ref = list(spec.cases(dt))
            with ops.use_kernels("numba"):
                twin = list(spec.cases(dt))
            for r, t in zip(ref, twin, strict=True):
                for key, want in r.expected.items():
                    got = t.expected[key]
                    if isinstance(want, np.ndarray) and want.dtype.kind == "f":
                        assert want.dtype == np.float64 and got.dtype == np.float64, (name, key)
                        w, g = np.nan_to_num(want), np.nan_to_num(got)
                        assert np.linalg.norm(g - w) <= 1e-12 * max(np.linalg.norm(w), 1e-300), (name, key)


def test_summary_names_every_implementation_an_op_ran_with_its_calls():
    kernels.clear_used()
    assert kernels.summary() == "no op has run yet"
    x = np.ones((2, 3), np.float32)
    with ops.use_kernels("numpy"):
        ops.layernorm_inference(x, np.ones(3, np.float32), np.zeros(3, np.float32))
        ops.layernorm_inference(x, np.ones(3, np.float32), np.zeros(3, np.float32))
    assert kernels.summary() == "numpy: layernorm_inference"
    assert kernels.summary(counts=True) == "numpy: layernorm_inference (2)"
    kernels.record("layernorm_inference", "numba")           # as a large array on auto would
    assert kernels.summary(counts=True) == "numba: layernorm_inference (1); numpy: layernorm_inference (2)"
    assert kernels.kernels_used() == {"layernorm_inference": "numba"}   # the latest call
    kernels.clear_used()
    assert kernels.summary() == "no op has run yet" and kernels.kernels_used() == {}
