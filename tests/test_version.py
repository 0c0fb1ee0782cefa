"""The version lives in pyproject.toml alone: ``npformer --version`` and ``npformer.__version__`` read it
from the installed package's metadata, or, in a source tree that is not installed, from that tree's
pyproject.toml; CHANGELOG.md's newest release is that version."""
import os
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

import npformer

ROOT = Path(__file__).resolve().parents[1]


def pyproject_version() -> str:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]


def test_version_command_reads_the_installed_metadata(tmp_path):
    # a distribution of another version, first on the path: the command must print its version, not a copy
    info = tmp_path / "npformer-9.8.7.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: npformer\nVersion: 9.8.7\n", encoding="utf-8")
    path = os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH")) if p)
    proc = subprocess.run([sys.executable, "-m", "npformer", "--version"], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": path}, timeout=60)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "npformer 9.8.7\n", "")


def test_a_source_tree_that_is_not_installed_reads_its_pyproject(monkeypatch):
    def not_installed(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", not_installed)
    assert npformer._version() == pyproject_version()


def test_the_changelog_names_this_version_as_its_newest_release():
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    releases = re.findall(r"^## \[(\d[^\]]*)\] - \d{4}-\d{2}-\d{2}$", changelog, re.MULTILINE)
    assert releases and releases[0] == pyproject_version()
