"""The package as a user receives it: ``python -m build --no-isolation`` makes the sdist and, from it, the
wheel; the wheel is installed into a fresh virtual environment, and npformer runs there, away from the
source tree (no PYTHONPATH, another working directory), so that a file missing from the package data
(the explorer page, the paraphrase sets, ...) fails here and not on a user's machine. The workbook of
``npformer learn init`` is written from code, not from files, so it is compared byte for byte instead.

The build runs on a copy of the checkout, so no build/, dist/ or *.egg-info is left in it. The fresh
environment gets its dependencies the way pip would: exactly the distributions that the wheel's
``Requires-Dist`` names, with their own requirements, linked from the environment running the tests
(which ``pip install -e '.[test]'`` filled). Nothing is downloaded and nothing else is visible there:
not the test extras, not torch, not the checkout. pip then installs the wheel with ``--no-index``,
checking that each requirement is met.
"""
from __future__ import annotations

import email
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from importlib import metadata
from pathlib import Path
from types import SimpleNamespace

import pytest

from oracles import require

ROOT = Path(__file__).resolve().parents[1]
# what a checkout holds that is not source: never copied for the build
NOT_SOURCE = (".git", ".venv", "venv", "__pycache__", "*.egg-info", "build", "dist", "runs", "site", ".pytest_cache",
              ".hypothesis", ".mypy_cache", ".ruff_cache")
# build outputs that must not appear in the checkout
LEFT_BEHIND = ("build", "dist", "src/*.egg-info")
# variables that would put the source tree, or another environment, on the installed npformer's path
PATH_VARIABLES = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE", "VIRTUAL_ENV", "__PYVENV_LAUNCHER__")
# what the sdist holds, besides PKG-INFO and the like
SDIST_FOLDERS = ("src", "tests", "docs", "benchmarks")
SDIST_FILES = ("pyproject.toml", "README.md", "Makefile", "LICENSE", "CHANGELOG.md", "CONTRIBUTING.md", "mkdocs.yml")
TIMEOUT = 120


def _run(cmd, *, cwd, env, what):
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, f"{what} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def _clean_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in PATH_VARIABLES and not k.startswith("PIP_")}
    return {**env, **extra}


def _requirements(wheel: Path) -> list[str]:
    """The Requires-Dist lines of the wheel's METADATA."""
    with zipfile.ZipFile(wheel) as z:
        name = next(n for n in z.namelist() if re.fullmatch(r"[^/]+\.dist-info/METADATA", n))
        return email.message_from_bytes(z.read(name)).get_all("Requires-Dist") or []


def _dependency_closure(requires: list[str]) -> dict:
    """{name: Distribution} of every distribution a plain ``pip install`` of these requirements installs,
    resolved against the distributions installed here (a requirement's extras bring in theirs)."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    found: dict = {}                                   # name -> (Distribution, extras already followed)
    todo = [(Requirement(r), "") for r in requires]
    while todo:
        req, extra = todo.pop()
        if req.marker is not None and not req.marker.evaluate({"extra": extra}):
            continue
        key = canonicalize_name(req.name)
        dist, done = found.get(key, (None, None))
        if dist is None:
            try:
                dist = metadata.distribution(req.name)
            except metadata.PackageNotFoundError:
                pytest.fail(f"{req.name}, a requirement of npformer's wheel, is not installed here: "
                            f"install the test extras with {sys.executable} -m pip install -e '.[test]'")
        elif set(req.extras) <= done:
            continue
        extras = (done or set()) | set(req.extras)
        found[key] = (dist, extras)
        todo += [(Requirement(r), e) for r in dist.requires or [] for e in ("", *sorted(extras))]
    return {key: dist for key, (dist, _) in found.items()}


def _link_dependencies(dists: dict, site_packages: Path) -> None:
    """Symlink each distribution's top-level files and folders (from its RECORD) into site_packages."""
    for key, dist in sorted(dists.items()):
        if dist.files is None:
            pytest.fail(f"distribution {key} has no RECORD, so its files cannot be linked into the fresh environment")
        location = Path(dist.locate_file(""))
        tops = {f.parts[0] for f in dist.files if f.parts and f.parts[0] not in ("..", "__pycache__")}
        for top in sorted(tops):
            target = site_packages / top
            if not (target.exists() or target.is_symlink()):   # a namespace folder two distributions share
                target.symlink_to(location / top, target_is_directory=(location / top).is_dir())


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """Build the sdist and the wheel from a copy of the checkout, install the wheel into a fresh virtual
    environment, and return what the tests need to run it: bin, python, env, cwd, version."""
    require("build")
    require("setuptools")                              # the build backend, used as installed (--no-isolation)
    base = tmp_path_factory.mktemp("wheel")
    before = {str(p) for pattern in LEFT_BEHIND for p in ROOT.glob(pattern)}
    source, dist_dir, venv, cwd = base / "source", base / "dist", base / "venv", base / "cwd"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(*NOT_SOURCE), symlinks=True)
    env = _clean_env(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1")
    _run([sys.executable, "-m", "build", "--no-isolation", "--outdir", dist_dir, source], cwd=base, env=env,
         what="python -m build --no-isolation")
    after = {str(p) for pattern in LEFT_BEHIND for p in ROOT.glob(pattern)}
    assert after == before, f"the build wrote into the checkout: {sorted(after - before)}"
    sdists, wheels = sorted(dist_dir.glob("npformer-*.tar.gz")), sorted(dist_dir.glob("npformer-*-py3-none-any.whl"))
    assert len(sdists) == 1 and len(wheels) == 1, sorted(p.name for p in dist_dir.iterdir())
    wheel = wheels[0]

    _run([sys.executable, "-m", "venv", "--without-pip", venv], cwd=base, env=env, what="python -m venv")
    python = venv / "bin" / "python"
    site_packages = Path(_run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], cwd=base,
                              env=env, what="the fresh environment's python").stdout.strip())
    _link_dependencies(_dependency_closure(_requirements(wheel)), site_packages)
    # the outer pip installs into the fresh environment (pip --python); --no-index: every requirement must be met
    _run([sys.executable, "-m", "pip", "--python", python, "install", "--no-index", "-q", wheel], cwd=base, env=env,
         what=f"pip install {wheel.name}")
    cwd.mkdir()
    return SimpleNamespace(bin=venv / "bin", python=python, env=_clean_env(), cwd=cwd, site_packages=site_packages,
                           version=wheel.name.split("-")[1], sdist=sdists[0], source=source)


def _npformer(installed, *args):
    return _run([installed.bin / "npformer", *args], cwd=installed.cwd, env=installed.env,
                what="npformer " + " ".join(map(str, args))).stdout


def test_the_fresh_environment_imports_npformer_from_the_wheel_and_nothing_from_the_checkout(installed):
    probe = ("import importlib.metadata as m, importlib.util as u, json, sys, npformer\n"
             "print(json.dumps({'file': npformer.__file__, 'version': m.version('npformer'), 'path': sys.path,\n"
             "                  'torch': bool(u.find_spec('torch')), 'pytest': bool(u.find_spec('pytest'))}))")
    seen = json.loads(_run([installed.python, "-c", probe], cwd=installed.cwd, env=installed.env,
                           what="import npformer").stdout)
    assert Path(seen["file"]).parent == installed.site_packages / "npformer"
    assert not Path(seen["file"]).is_symlink() and not Path(seen["file"]).resolve().is_relative_to(ROOT)
    assert str(ROOT / "src") not in seen["path"] and sysconfig.get_path("purelib") not in seen["path"]
    assert not seen["torch"] and not seen["pytest"], "the test environment's packages leak into the fresh one"
    assert seen["version"] == installed.version
    assert _npformer(installed, "--version").split() == ["npformer", installed.version]


def test_a_plain_install_runs_the_numpy_references_without_numba(installed):
    """numba comes only with the fast extra: a plain install runs every op on its NumPy reference."""
    probe = ("import importlib.util as u, json, numpy as np\nfrom npformer import ops\n"
             "x = np.ones((512, 512), np.float32)\n"
             "ops.layernorm_forward(x, np.ones(512, np.float32), np.zeros(512, np.float32))\n"
             "print(json.dumps([bool(u.find_spec('numba')), ops.kernels_used()]))")
    seen = json.loads(_run([installed.python, "-c", probe], cwd=installed.cwd, env=installed.env,
                           what="a layer norm in the fresh environment").stdout)
    assert seen == [False, {"layernorm_forward": "numpy"}]


def test_the_sdist_holds_the_package_the_tests_the_docs_and_the_benchmarks(installed):
    with tarfile.open(installed.sdist) as tar:
        names = {name.split("/", 1)[1] for name in tar.getnames() if "/" in name}
    src = installed.source                             # the copy the sdist was built from
    expected = {p.relative_to(src).as_posix() for folder in SDIST_FOLDERS for p in (src / folder).rglob("*")
                if p.is_file() and "__pycache__" not in p.parts and not p.name.startswith(".")}
    expected |= {name for name in SDIST_FILES if (src / name).is_file()}
    missing = sorted(expected - names)
    assert not missing, f"the sdist lacks {len(missing)} file(s) (MANIFEST.in): {missing[:10]}"


def test_every_file_of_the_source_package_is_installed(installed):
    source, target = ROOT / "src" / "npformer", installed.site_packages / "npformer"
    files = sorted(p.relative_to(source) for p in source.rglob("*")
                   if p.is_file() and "__pycache__" not in p.parts and not p.name.startswith("."))
    missing = [str(f) for f in files if not (target / f).is_file()]
    assert not missing, f"the wheel lacks {len(missing)} file(s) of src/npformer (package data?): {missing[:10]}"
    differ = [str(f) for f in files if (target / f).read_bytes() != (source / f).read_bytes()]
    assert not differ, f"installed files differ from the source tree: {differ[:10]}"


def test_the_paraphrase_sets_are_read_from_the_installed_package(installed):
    probe = ("import json; from npformer.data.tabletop_policy import PARAPHRASES, read_instructions\n"
             "print(json.dumps({'dir': str(PARAPHRASES), 'counts': {p.relative_to(PARAPHRASES).as_posix(): "
             "len(read_instructions(p)) for p in sorted(PARAPHRASES.rglob('*.tsv'))}}))")
    seen = json.loads(_run([installed.python, "-c", probe], cwd=installed.cwd, env=installed.env,
                           what="read the paraphrase sets").stdout)
    assert Path(seen["dir"]) == installed.site_packages / "npformer" / "data" / "paraphrases"
    source = ROOT / "src" / "npformer" / "data" / "paraphrases"
    # each line of a set that is neither blank nor a comment is one instruction
    expected = {p.relative_to(source).as_posix(): sum(1 for line in p.read_text(encoding="utf-8").splitlines()
                                                      if line.strip() and not line.lstrip().startswith("#"))
                for p in sorted(source.rglob("*.tsv"))}
    assert expected and seen["counts"] == expected


def test_lesson_section_1_prints_what_the_source_tree_prints(installed):
    from npformer import lesson
    expected: list[str] = []
    lesson.run(1, out=expected.append)
    assert _npformer(installed, "lesson", "--section", "1").splitlines() == "\n".join(expected).splitlines()


def test_explore_writes_the_page_with_its_script_style_and_payload(installed, tmp_path, capsys):
    from npformer.cli import main
    run = tmp_path / "copy"
    assert main(["train", "copy", "--out", str(run), "--steps", "2", "--seed", "1", "--no-progress", "--no-plot",
                 "--set", "d_model=16", "--set", "n_heads=2", "--set", "d_ff=32", "--set", "n_encoder_layers=1",
                 "--set", "n_decoder_layers=1", "--set", "n_symbols=4", "--set", "data.max_len=4",
                 "--set", "eval_n=8", "--set", "final_eval_n=8"]) == 0
    capsys.readouterr()
    page = tmp_path / "page.html"
    assert _npformer(installed, "explore", run, "abca", "--out", page).strip() == str(page)
    text = page.read_text(encoding="utf-8")
    # the page files as they are in the source tree: a wheel without them fails before writing anything
    for name in ("explore.js", "explore.css"):
        assert (ROOT / "src/npformer/explore/page" / name).read_text(encoding="utf-8") in text, name
    payload = json.loads(re.search(r'<script type="application/json" id="payload">(.*?)</script>', text, re.S)[1])
    assert payload["version"] == 1 and payload["model"]["kind"] == "copy" and payload["model"]["d_model"] == 16
    assert "abca" in json.dumps(payload["inputs"])


def test_learn_init_writes_the_workbook_the_source_tree_writes(installed, tmp_path, monkeypatch):
    from npformer.learn.workbook import init
    monkeypatch.chdir(tmp_path)                        # the files name their folder as it was given: "workbook"
    init("workbook")
    out = _npformer(installed, "learn", "init", "workbook")
    assert "transformer.py" in out
    for name in ("transformer.py", "README.md"):
        written = installed.cwd / "workbook" / name
        assert written.is_file(), f"npformer learn init did not write {name}"
        assert written.read_bytes() == (tmp_path / "workbook" / name).read_bytes(), name
