"""Runnable examples double as golden tests: their printed output is kept beside them."""
import subprocess
import sys
from pathlib import Path

import pytest

EXP = Path(__file__).resolve().parents[1] / "experiments"


@pytest.mark.parametrize("script", ["quickstart.py"])
def test_example_output_matches_golden(script):
    out = subprocess.run([sys.executable, str(EXP / script)], capture_output=True, text=True, check=True).stdout
    expected = (EXP / script.replace(".py", ".expected.txt")).read_text()
    assert out == expected
