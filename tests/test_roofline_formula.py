"""The roofline's decode-attention formula is written once (``RooflineCostModel._decode_terms``):
the fast paths that price decode steps without calling it (the memory-bound loop of
``decode_totals``, ``_price``'s inlined attention, ``_decode_attn_list``) read their constants
off it, so editing it changes the step price and TPOT too, not only ``attn_decode``."""
import pytest

from conftest import tiny_config
from sim import simulate
from sim.cost.roofline import RooflineCostModel
from sim.types import BatchShape


def _model():
    from sim.catalog import get_hardware, get_model
    from sim.cost import make_cost_model
    from sim.config import load_config

    cfg = load_config(tiny_config())
    return make_cost_model(cfg, get_model(cfg.model), get_hardware(cfg.hardware))


def test_the_fast_constants_are_read_off_the_formula():
    m = _model()
    F, K, QB = m._decode_linear()
    for n, kv in ((1, 17), (64, 50_000)):
        assert m._decode_terms(n, kv) == (F * kv, K * kv + QB * n)


@pytest.mark.parametrize("factor", [2, 3])
def test_editing_the_formula_moves_every_price(monkeypatch, factor):
    """Double (or triple) the KV bytes in ``_decode_terms``: ``attn_decode``, a step's price,
    a run of decode prices and a simulation's TPOT all move, and they agree with each other."""
    base = _model()
    n, kv = 32, 32 * 3000
    shape = BatchShape((1,) * n, (3000 - 1,) * n, 0, 0, 1, 1)
    base_attn, base_step = base.attn_decode(n, kv), base.step_time(shape).total
    base_run = base.decode_totals(n, kv, 3000, 10)[0]
    real = RooflineCostModel._decode_terms

    def heavier(self, n, kv):
        flops, nbytes = real(self, n, kv)
        return flops, nbytes + (factor - 1) * (nbytes - real(self, n, 0)[1])  # kv bytes x factor

    cfg = tiny_config(workload={"rate": 4.0, "num_requests": 30, "prompt": {"kind": "fixed", "value": 6000},
                                "output": {"kind": "fixed", "value": 200}})
    before = simulate(cfg).summary["tpot_s"]["p50"]
    monkeypatch.setattr(RooflineCostModel, "_decode_terms", heavier)
    edited = _model()
    assert edited.attn_decode(n, kv) > base_attn
    st = edited.step_time(shape)
    assert st.attn_decode == pytest.approx(edited.layers_full * edited.attn_decode(n, kv), rel=1e-12)
    assert st.total > base_step
    run = edited.decode_totals(n, kv, 3000, 10)
    assert run[0] == pytest.approx(edited.decode_step(n, kv, 3000).total, rel=1e-12)
    assert run[0] > base_run
    after = simulate(cfg).summary["tpot_s"]["p50"]
    assert after > before


def test_a_formula_of_another_form_takes_the_general_path(monkeypatch):
    """A formula that is not linear in the KV length: no fast constants; the step price is the
    formula's."""
    real = RooflineCostModel._decode_terms

    def curved(self, n, kv):
        flops, nbytes = real(self, n, kv)
        return flops, nbytes + kv * kv // 1000

    monkeypatch.setattr(RooflineCostModel, "_decode_terms", curved)
    m = _model()
    assert m._decode_linear() is None
    n, kv = 8, 8 * 2000
    st = m.decode_step(n, kv, 2000)
    assert st.attn_decode == pytest.approx(m.layers_full * m.attn_decode(n, kv), rel=1e-12)
    assert m.decode_totals(n, kv, 2000, 5)[0] == st.total
