"""The experiments' line figures (experiments/policy_common.py): notes below the axes, never over
the x-axis label; latencies in ms with plain tick labels; series far above the rest cut at the
top edge and named; near-identical series called out."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments"))
import policy_common as pcm  # noqa: E402


def test_off_scale_and_coinciding():
    assert pcm.off_scale({"a": 1.0, "b": 1.0, "c": 0.9, "orca": 1000.0}) == (50.0, ["orca"])
    assert pcm.off_scale({"a": 1.0, "b": 1.2, "c": 20.0}) == (None, [])
    curves = {"a": np.array([[1, 10.0], [2, 20.0]]), "b": np.array([[1, 10.0], [2, 20.0]]),
              "c": np.array([[1, 10.1], [2, 20.2]]), "d": np.array([[1, 15.0], [2, 30.0]])}
    assert pcm.coinciding(curves) == {"b": "a"}
    assert pcm.coinciding(curves, pcm.NEAR) == {"b": "a", "c": "a"}
    assert pcm._plain(67720.4) == "67,720" and pcm._plain(0.125) == "0.125"
    assert pcm._minor(20.0) == "20" and pcm._minor(30.0) == "" and pcm._minor(500.0) == "500"


def test_line_figure_caption_below_the_axis_label(tmp_path, monkeypatch):
    rows = []
    for name, base in (("vllm", 0.01), ("vllm_v1", 0.02), ("priority", 0.02), ("sjf", 0.0201), ("orca", 50.0),
                       ("sarathi", 0.015)):
        rows += [{"scheduler": name, "rate": r, "tpot_p99_s": base * r} for r in (8, 16, 24)]
    df = pd.DataFrame(rows)
    figs = []
    import matplotlib.figure

    real = matplotlib.figure.Figure.savefig

    def keep(fig, *a, **k):
        figs.append(fig)
        return real(fig, *a, **k)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", keep)
    pcm.line_figures(df, tmp_path, x="rate", xlabel="load (requests/s)", series="scheduler",
                     metrics=[("tpot_p99_s", "p99 TPOT (ms, log scale)", True, 1e3)], title="t")
    assert (tmp_path / "figures" / "tpot_p99_s.png").is_file() and (tmp_path / "figures" / "tpot_p99_s.svg").is_file()
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig = figs[0]
    FigureCanvasAgg(fig).draw()  # (the figure was closed: give it a canvas again)
    ax = fig.axes[0]
    note = next(t for t in fig.texts if "cut" in t.get_text() or "off the scale" in t.get_text())
    text = note.get_text()
    assert "priority = vllm_v1" in text and "sjf ~ vllm_v1" in text and "orca (up to 1,200,000)" in text
    r = fig.canvas.get_renderer()
    assert note.get_window_extent(r).y1 < ax.xaxis.label.get_window_extent(r).y0  # below the label, no overlap
    assert ax.get_ylim()[1] < 1e6  # orca (1.2e6 ms) is cut, the others keep the scale
    labels = [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
    assert labels and not any("^" in s or "e+" in s for s in labels), labels  # plain numbers, not 6x10^-2
