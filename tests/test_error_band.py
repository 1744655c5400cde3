"""Error bands (sim/metrics/error_band.py): a band always contains the point estimate; a run is
matched to its nearest validated group, or told there is none."""
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sim.metrics.error_band import band_of, error_band, nearest_group, widen

TABLE = {"source": "hand-made", "groups": [
    {"framework": "vllm", "hardware": "h100-sxm", "dtype": "bf16", "concurrency": "1-8", "rows": 5,
     "ttft_error": [-0.2, 0.1], "tpot_error": [-0.06, 0.09]},
    {"framework": "vllm", "hardware": "h100-sxm", "dtype": "bf16", "concurrency": "33-127", "rows": 4,
     "ttft_error": [0.1, 0.3], "tpot_error": [0.02, 0.05]},
    {"framework": "trtllm", "hardware": "h200-sxm", "dtype": "fp8", "concurrency": "9-32", "rows": 7,
     "ttft_error": [-0.1, 0.2], "tpot_error": [-0.1, 0.0]},
]}


@given(st.floats(0, 1e4), st.floats(-0.99, 20), st.floats(-0.99, 20))
def test_a_band_always_contains_the_point_estimate(v, e1, e2):
    lo, hi = widen(v, sorted((e1, e2)))
    assert lo <= v <= hi


def test_a_band_is_the_measured_values_the_errors_allow():
    # predicted 11 ms; the model errs -6%..+9%: measured 11 / 1.09 .. 11 / 0.94
    lo, hi = widen(0.011, [-0.06, 0.09])
    assert lo == pytest.approx(0.011 / 1.09) and hi == pytest.approx(0.011 / 0.94)
    assert widen(0.010, [0.1, 0.3]) == pytest.approx([0.010 / 1.3, 0.010])  # always over: widened to the point


def test_the_nearest_validated_group():
    assert band_of(4.2) == "1-8" and band_of(8.6) == "9-32" and band_of(200) == "128+"
    g, how = nearest_group("vllm", "h100-sxm", "bf16", 3.0, TABLE)
    assert g["concurrency"] == "1-8" and how == "exact group"
    g, how = nearest_group("vllm", "h100-sxm", "bf16", 20.0, TABLE)  # 9-32 missing: 1-8 and 33-127 both one away
    assert g["concurrency"] == "1-8" and "concurrency 1-8 for 9-32" in how  # ties: more rows first
    g, how = nearest_group("vllm", "h100-sxm", "fp8", 50.0, TABLE)
    assert g["dtype"] == "bf16" and g["concurrency"] == "33-127" and "another dtype" in how
    g, how = nearest_group("sglang", "h100-sxm", "bf16", 3.0, TABLE)
    assert g is None and how == "no validation for this group (sglang on h100-sxm, bf16, concurrency 1-8)"


def test_the_summary_block():
    info = {"framework": "vllm"}
    b = error_band(info, "kerneldb", "h100-sxm", "bf16", 2.0, {"p50": 0.05, "p90": 0.1, "p99": None},
                   {"p50": 0.011, "p90": 0.012, "p99": 0.013}, TABLE)
    assert b["rows"] == 5 and b["tpot_error"] == [-0.06, 0.09]
    assert b["tpot_s"]["p50"] == pytest.approx([0.011 / 1.09, 0.011 / 0.94]) and b["ttft_s"]["p99"] is None
    assert "roofline" in error_band(None, "roofline", "h100-sxm", "bf16", 2.0, {}, {}, TABLE)["note"]
    none = error_band(info, "kerneldb", "l40s", "fp8", 2.0, {}, {}, TABLE)
    assert none["note"].startswith("no validation for this group")
