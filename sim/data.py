"""Where the data shipped beside the simulator lives, found without importing the code that made it.

The fitted cost tables ship as package data of the ``calibration`` package
(``calibration/fitted/<hardware>/<model>/``, see pyproject.toml's package-data). The simulator
reads them but must not import the calibration package's code (a later pipeline stage, free to
grow heavier imports). ``importlib.util.find_spec`` of a top-level package locates it on the
import path without executing it, so this module asks the import system where the package lies
and returns the data folder inside it. A user's own tables go through ``cost.profiles_dir``.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path


def package_dir(name: str) -> Path | None:
    """The folder of the top-level package ``name`` on the import path, without importing it
    (None when it is not installed)."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def shipped_fitted_root() -> Path | None:
    """``calibration/fitted`` of the installed checkout or distribution (None without one)."""
    pkg = package_dir("calibration")
    return None if pkg is None else pkg / "fitted"
