"""What the kernel-database model extrapolated (per operator, share of GPU time) and how it
prices an attention head shape the database lacks: exact figures on hand-made grids."""
import numpy as np
import pytest

from sim.cost.kerneldb import Extrapolation, Grid, KernelDbCostModel, _attn_grid
from sim.cost.roofline import COUNT_MASK
from sim.metrics.extrapolation import annotate


def bare_model() -> KernelDbCostModel:
    """Only what ``_lookup`` reads: the packed count and its ledger."""
    cm = object.__new__(KernelDbCostModel)
    cm._oor, cm._extrap = 0, Extrapolation()
    return cm


GRID = Grid([np.array([1.0, 2.0, 4.0])], np.array([1e-3, 2e-3, 4e-3]))  # 1 ms per unit, x in [1, 4]
ROOF = lambda x: x[0] * 1e-3  # noqa: E731  (the roofline: linear in x)


def test_queries_outside_a_hand_made_grid_are_counted_per_operator_with_their_time():
    cm = bare_model()
    assert cm._lookup(GRID, ROOF, (2.0,), "A", 10) == pytest.approx(2e-3)  # inside: nothing recorded
    assert cm._oor == 0
    assert cm._lookup(GRID, ROOF, (8.0,), "A", 10) == pytest.approx(8e-3)  # 4 ms at the edge x 8/4
    before = cm._oor
    cm._lookup(GRID, ROOF, (0.5,), "B", 1)  # below the grid: 1 ms x 0.5
    delta_b = cm._oor - before
    cm._oor += 3 * delta_b  # a memo replaying B three times more (as the fast paths do)
    assert cm.out_of_range_total() == 5 and cm._oor & COUNT_MASK == 5
    ext = {e["operator"]: e for e in cm.extrapolated()}
    assert ext["A"]["queries"] == 1 and ext["A"]["gpu_s"] == pytest.approx(0.08)  # 8 ms x 10 layers
    assert ext["B"]["queries"] == 4 and ext["B"]["gpu_s"] == pytest.approx(4 * 0.5e-3)
    assert ext["A"]["query_range"] == [[8.0, 8.0]] and ext["A"]["grid_range"] == [[1.0, 4.0]]
    assert ext["B"]["query_range"] == [[0.5, 0.5]]


def test_only_a_material_share_warns_naming_the_operator_and_shapes():
    cm = bare_model()
    cm._lookup(GRID, ROOF, (8.0,), "big op (x)", 10)  # 80 ms
    cm._lookup(GRID, ROOF, (6.0,), "big op (x)", 10)  # 60 ms
    cm._lookup(GRID, ROOF, (0.5,), "small op (x)", 1)  # 0.5 ms
    out, warnings = annotate(cm.extrapolated(), busy_s=1.0)
    assert [e["operator"] for e in out] == ["big op (x)", "small op (x)"]
    assert out[0]["gpu_share"] == pytest.approx(0.14) and out[0]["material"]
    assert out[1]["gpu_share"] == pytest.approx(0.0005) and not out[1]["material"]
    assert len(warnings) == 1
    assert "big op (x)" in warnings[0] and "14.0%" in warnings[0] and "x = 6-8 (measured grid 1-4)" in warnings[0]
    assert annotate(cm.extrapolated(), busy_s=100.0)[1] == []  # 0.14% of a longer run: no warning


def rows(counts, floor, per_head, batches=(1.0, 8.0), lengths=(32.0, 1024.0), q_per_kv=1):
    """Decode attention rows (batch, length, q heads, kv heads, head dim 128, bf16 KV, seconds):
    a fixed floor plus a time per KV head that grows with batch x length."""
    out = []
    for n in counts:
        for b in batches:
            for s in lengths:
                out.append((b, s, n * q_per_kv, n, 128.0, 0.0, floor + per_head * n * b * s / 32.0))
    return np.array(out)


def test_a_missing_head_count_keeps_the_launch_floor_once():
    # measured at 4 and 8 KV heads: 10 us + 0.1 us per head (x batch x length / 32)
    r = rows([4, 8], 10e-6, 0.1e-6)
    grid, note = _attn_grid(r, 32, 32, 128, False, "kv")
    assert "(8, 8) and (4, 4)" in note
    for b, s in ((1.0, 32.0), (8.0, 1024.0)):
        assert grid((b, s)) == pytest.approx(10e-6 + 0.1e-6 * 32 * b * s / 32.0, rel=1e-9)
    # the old rule (nearest shape x 4) would have priced batch 1, length 32 at 4 x 10.8 us
    assert grid((1.0, 32.0)) < 0.4 * 4 * (10e-6 + 0.8e-6)


def test_a_measured_shape_is_used_as_it_is():
    r = rows([4, 8, 32], 10e-6, 0.1e-6)
    grid, note = _attn_grid(r, 32, 32, 128, False, "kv")
    assert note == "" and grid((1.0, 32.0)) == pytest.approx(10e-6 + 3.2e-6)


def test_with_one_shape_of_the_grouping_only_the_part_above_the_floor_scales():
    r = rows([8], 10e-6, 0.1e-6)  # one measured shape: floor = its smallest cell (batch 1, length 32)
    grid, note = _attn_grid(r, 16, 16, 128, False, "kv")
    floor = 10e-6 + 0.8e-6
    assert "smallest time" in note and "x 2" in note
    assert grid((1.0, 32.0)) == pytest.approx(floor)
    t = 10e-6 + 0.1e-6 * 8 * 8 * 1024 / 32
    assert grid((8.0, 1024.0)) == pytest.approx(floor + (t - floor) * 2)


def test_the_warning_names_the_axes_of_the_operator():
    from sim.metrics.extrapolation import shape_text

    e = {"operator": "lm_head GEMM, bfloat16 (m x n x k)", "query_range": [[1.0, 45.0], [128256.0, 128256.0], [4096.0, 4096.0]],
         "grid_range": [[1.0, 32768.0], [32.0, 65536.0], [32.0, 65536.0]]}
    assert shape_text(e) == "m x n x k = 1-45 x 128,256 x 4,096 (measured grid 1-32,768 x 32-65,536 x 32-65,536)"
