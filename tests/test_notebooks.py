"""The notebooks execute top to bottom (each well under a minute)."""
from __future__ import annotations

from pathlib import Path

import pytest

NB = Path(__file__).resolve().parent.parent / "notebooks"


@pytest.mark.parametrize("name", ["quickstart", "policy_comparison", "capacity_planning"])
def test_notebook_executes(name, tmp_path):
    nbformat = pytest.importorskip("nbformat", reason="nbformat is not installed (pip install -e '.[test]' in the servesim checkout)")
    nbclient = pytest.importorskip("nbclient", reason="nbclient is not installed (pip install -e '.[test]' in the servesim checkout)")
    nb = nbformat.read(NB / f"{name}.ipynb", as_version=4)
    client = nbclient.NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors
