"""What the cost model extrapolated, and whether it matters: per operator, the queries priced
outside the measured grid and the share of the run's simulated GPU time they carry.

The kernel-database model records, per operator, each such query's time per step (the operator's
time times the layers it runs in; ``sim.cost.kerneldb.Extrapolation``). The share is that time
over the busy time of every replica (the sum of all step times, ``StepLog.busy_ns``). A share
above ``MATERIAL_SHARE`` gets a warning naming the operator and the shape range.
"""
from __future__ import annotations

MATERIAL_SHARE = 0.05
"""Below 5% of the GPU time, even a 2x error of the extrapolated operators moves step times by
less than the kernel database's own measured error (docs/kernel_database.md)."""


def _fmt(v: float) -> str:
    return f"{v:,.0f}" if float(v).is_integer() else f"{v:,.4g}"


def shape_text(e: dict) -> str:
    """``m x n x k = 1-45 x 128,256 x 4,096 (measured grid 1-32,768 x 32-65,536 x 32-65,536)``: the
    axes named in the operator's last parentheses."""
    op = e["operator"]
    axes = op[op.rindex("(") + 1:].rstrip(")") if op.endswith(")") else ""
    q = " x ".join(_fmt(a) if a == b else f"{_fmt(a)}-{_fmt(b)}" for a, b in e["query_range"])
    g = " x ".join(f"{_fmt(a)}-{_fmt(b)}" for a, b in e["grid_range"])
    return f"{axes + ' = ' if axes else ''}{q} (measured grid {g})"


def annotate(entries: list[dict], busy_s: float) -> tuple[list[dict], list[str]]:
    """The entries with ``gpu_share`` (of the busy time, to 6 decimals) and ``material``, largest
    share first, and one warning per material operator."""
    out, warnings = [], []
    for e in entries:
        share = round(e["gpu_s"] / busy_s, 6) if busy_s > 0 else None
        out.append({**e, "gpu_share": share, "material": share is not None and share > MATERIAL_SHARE})
    out.sort(key=lambda e: (-(e["gpu_share"] or 0.0), e["operator"]))
    for e in out:
        if e["material"]:
            warnings.append(f"extrapolated: {e['operator']} priced outside the measured grid in {e['queries']:,} "
                            f"queries carrying {100 * e['gpu_share']:.1f}% of the simulated GPU time; shapes "
                            f"{shape_text(e)}; priced at the grid edge scaled by the roofline")
    return out, warnings
