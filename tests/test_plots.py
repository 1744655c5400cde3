"""Figures of large runs stay cheap: a CDF draws at most ``CDF_POINTS`` points, and more than
``SCATTER_MARKERS`` requests are drawn as a 2D histogram, not one marker each."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from sim.metrics import plots  # noqa: E402


def test_a_cdf_of_many_values_keeps_its_ends_and_shape():
    rng = np.random.default_rng(0)
    v = rng.lognormal(0, 1, 100_000)
    fig, ax = plt.subplots()
    plots.cdf(ax, v, "x")
    x, y = ax.lines[0].get_data()
    plt.close(fig)
    assert len(x) <= plots.CDF_POINTS
    assert x[0] == v.min() and x[-1] == v.max() and y[-1] == 1.0
    assert np.all(np.diff(x) >= 0) and np.all(np.diff(y) > 0)
    mid = np.searchsorted(y, 0.5)
    assert abs(x[mid] - np.median(v)) / np.median(v) < 0.01


def _requests(n):
    rng = np.random.default_rng(1)
    return pd.DataFrame({"status": ["finished"] * n, "arrival_s": np.sort(rng.uniform(0, 100, n)),
                         "e2e_s": rng.uniform(0.1, 5, n), "ttft_s": rng.uniform(0.01, 1, n),
                         "tpot_s": rng.uniform(0.005, 0.05, n)})


def test_many_requests_are_a_hexbin_few_are_markers(tmp_path, monkeypatch):
    drawn = []
    real = plots.save

    def keep(fig, out, name):
        if name == "e2e_vs_arrival":
            drawn.append([type(c).__name__ for c in fig.axes[0].collections])
        return real(fig, out, name)

    monkeypatch.setattr(plots, "save", keep)
    steps = pd.DataFrame()
    plots.plot_run(_requests(plots.SCATTER_MARKERS + 1), steps, tmp_path / "many")
    plots.plot_run(_requests(100), steps, tmp_path / "few")
    assert drawn[0] == ["PolyCollection"] and drawn[1] == ["PathCollection"]
    assert (tmp_path / "many" / "e2e_vs_arrival.svg").stat().st_size < 400_000
