"""Command-line flags of the profiler, shared by ``python -m kernels.profile`` and
``servesim profile``. Imports nothing heavy, so ``servesim`` can build its parser without torch."""
from __future__ import annotations

import argparse
import os
from pathlib import Path

from kernels.schema import FAMILIES

GRID_NAMES = ("small", "full")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", choices=["cuda", "cpu"], default=None, help="default: cuda when available, else cpu")
    p.add_argument("--model", required=True, help="catalog model id, or a path to a model-card YAML")
    p.add_argument("--tp", default="1", help="tensor-parallel degrees, comma-separated (default 1)")
    p.add_argument("--dtype", default="bf16", help="profile dtype(s), comma-separated: bf16, fp16, fp32")
    p.add_argument("--grid", choices=GRID_NAMES, default="small", help="small: CPU/CI grid; full: GPU grid")
    p.add_argument("--out", default="calibration/profiles", help="profiles root; writes OUT/<hardware>/<model>/")
    p.add_argument("--hardware-id", default=None, help="catalog hardware id (default: detected; 'cpu' on CPUs)")
    p.add_argument("--ops", default=",".join(FAMILIES), help=f"operator families (default all): {','.join(FAMILIES)}")
    p.add_argument("--threads", type=int, default=1, help="torch threads on the CPU (default 1, for stable timings)")
    p.add_argument("--attention", choices=["paged", "contiguous"], default="paged",
                   help="decode attention to time: paged (KV blocks through a block table, as vLLM; default) or "
                        "contiguous (SDPA over a contiguous cache, as Hugging Face transformers)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--estimate", action="store_true", help="print grid sizes and a time estimate; profile nothing")


class ProfileError(ValueError):
    """Bad input: an unknown model, a tp that does not divide the model, a missing device."""


def resolve_model(arg: str):
    """(card, where it came from) for a catalog id / alias or a path to a model-card YAML file."""
    from sim.catalog import CatalogError, get_model, load_model_card

    try:
        if arg.endswith((".yaml", ".yml")) or os.path.isfile(arg):
            return load_model_card(arg), f"card file {Path(arg).name}"
        return get_model(arg), "catalog"
    except CatalogError as e:
        raise ProfileError(str(e)) from None
