"""``learn init`` keeps the learner's files safe: a README.md or transformer.py that is a link is backed up
as the link itself (never a copy of what it points to), a backup keeps the original's permission bits, and
without --force nothing of the learner's is replaced, README.md included."""
from __future__ import annotations

import os
import stat

import pytest

from npformer.learn.workbook import init, readme_text


def mode(path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_without_force_the_learners_readme_stays(tmp_path, capsys):
    from npformer.cli import main
    (tmp_path / "README.md").write_text("my notes\n")
    written = init(tmp_path)
    assert (tmp_path / "README.md").read_text() == "my notes\n" and tmp_path / "README.md" not in written
    assert not (tmp_path / "README.md.bak").exists() and (tmp_path / "transformer.py").is_file()
    os.remove(tmp_path / "transformer.py")
    assert main(["learn", "init", str(tmp_path)]) == 0
    assert f"kept {tmp_path / 'README.md'} as it was" in capsys.readouterr().out
    assert (tmp_path / "README.md").read_text() == "my notes\n"
    init(tmp_path, force=True)                                  # --force: replaced, the notes kept as .bak
    assert (tmp_path / "README.md.bak").read_text() == "my notes\n"
    assert (tmp_path / "README.md").read_text() == readme_text(str(tmp_path))


@pytest.mark.parametrize("name", ["README.md", "transformer.py"])
def test_a_link_is_backed_up_as_the_link_and_a_file_keeps_its_mode(tmp_path, name):
    secret = tmp_path / "secret.txt"
    secret.write_text("private\n")
    os.chmod(secret, 0o600)
    work = tmp_path / "work"
    work.mkdir()
    os.symlink(secret, work / name)
    init(work, force=True)
    bak = work / f"{name}.bak"
    assert bak.is_symlink() and os.readlink(bak) == str(secret)  # the link itself, not a 0644 copy
    assert not (work / name).is_symlink() and secret.read_text() == "private\n"
    os.remove(work / name)
    (work / name).write_text("mine\n")
    os.chmod(work / name, 0o600)
    init(work, force=True)
    assert (work / f"{name}.1.bak").read_text() == "mine\n" and mode(work / f"{name}.1.bak") == 0o600
