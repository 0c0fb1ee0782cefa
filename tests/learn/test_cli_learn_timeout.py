"""``npformer learn check --timeout T`` takes 0 < T <= 3,600 seconds; anything else is one line and exit 2
(1e10 used to overflow the time limit's arithmetic into a traceback)."""
import pytest

from npformer.cli import main
from npformer.cli.learn import _timeout
from npformer.learn.runner import check_timeout


@pytest.mark.parametrize("value", ["1e10", "3600.5", "nan", "inf", "-inf", "0", "-1"])
def test_a_timeout_outside_0_to_3600_is_one_line_and_exit_2(tmp_path, capsys, value):
    (tmp_path / "transformer.py").write_text("")
    rc = main(["learn", "check", str(tmp_path), f"--timeout={value}"])
    out, err = capsys.readouterr()
    assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert err.startswith("npformer learn: error: --timeout must be") and "Traceback" not in err, err


def test_the_largest_timeout_is_3600_seconds():
    assert _timeout(3600.0, check_timeout) == 3600.0
    assert _timeout(0.25, check_timeout) == 0.25
