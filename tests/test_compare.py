"""servesim compare: vllm bench serve result files -> rebuilt workload -> simulation -> error table.

The result files here are SYNTHETIC TEST FIXTURES in the `vllm bench serve --save-result
--save-detailed` format, made up by ``make_fixture`` below with hand-picked numbers; they are
not measurements. ``python tests/test_compare.py`` rewrites tests/data/vllm_bench_*.json.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from sim.cli import main
from sim.compare import gamma_arrivals, load_vllm_bench
from sim.compare.metrics import real_metrics
from sim.compare.vllm_bench import BenchFileError

DATA = Path(__file__).parent / "data"
NOTE = ("SYNTHETIC TEST FIXTURE made by tests/test_compare.py (make_fixture): hand-picked numbers in the "
        "vllm bench serve result format; NOT a measurement of any server")

# Six requests; request 3 failed (error text, output length 0).
TTFTS = [0.10, 0.20, 0.30, 0.0, 0.40, 0.50]
OUT_LENS = [4, 3, 1, 0, 5, 2]
IN_LENS = [64, 128, 32, 100, 256, 16]
ERRORS = ["", "", "", "Connection reset by peer", "", ""]


def _itls(i: int) -> list[float]:
    """Gaps of request i: one per token after the first, 20 ms each plus 10 ms per request index."""
    return [0.02 + 0.01 * i] * max(OUT_LENS[i] - 1, 0)


def make_fixture(detailed: bool = True) -> dict:
    """A result dict computed the way vLLM's benchmark computes it (numpy, successful requests)."""
    ok = [i for i in range(6) if not ERRORS[i] and OUT_LENS[i] > 0]
    ttft = [TTFTS[i] for i in ok]
    e2e = [TTFTS[i] + sum(_itls(i)) for i in ok]
    tpot = [(e2e[k] - ttft[k]) / (OUT_LENS[i] - 1) for k, i in enumerate(ok) if OUT_LENS[i] > 1]
    itl = [g for i in ok for g in _itls(i)]
    duration = 2.0
    out_tok = sum(OUT_LENS[i] for i in ok)
    d = {"_note": NOTE, "date": "20250101-000000", "backend": "vllm", "label": None, "model_id": "meta-llama/Llama-3.1-8B",
         "tokenizer_id": "meta-llama/Llama-3.1-8B", "num_prompts": 6, "request_rate": 4.0, "burstiness": 1.0,
         "max_concurrency": None, "duration": duration, "completed": len(ok), "failed": 6 - len(ok),
         "total_input_tokens": sum(IN_LENS[i] for i in ok), "total_output_tokens": out_tok,
         "request_throughput": len(ok) / duration, "request_goodput": None, "output_throughput": out_tok / duration,
         "total_token_throughput": (out_tok + sum(IN_LENS[i] for i in ok)) / duration}
    for name, v in (("ttft", ttft), ("tpot", tpot), ("itl", itl), ("e2el", e2e)):
        d[f"mean_{name}_ms"] = float(np.mean(v)) * 1000
        d[f"median_{name}_ms"] = float(np.median(v)) * 1000
        d[f"std_{name}_ms"] = float(np.std(v)) * 1000
        d[f"p99_{name}_ms"] = float(np.percentile(v, 99)) * 1000
    if detailed:
        d.update(input_lens=IN_LENS, output_lens=OUT_LENS, ttfts=TTFTS, itls=[_itls(i) for i in range(6)],
                 generated_texts=["x" * n for n in OUT_LENS], errors=ERRORS)
    return d


def write(path: Path, d) -> Path:
    path.write_text(d if isinstance(d, str) else json.dumps(d, indent=1))
    return path


def run_compare(tmp_path, result: Path, *extra) -> tuple[int, dict | None]:
    out = tmp_path / "cmp"
    rc = main(["compare", str(result), "--hardware", "h100-sxm", "--out", str(out), *extra])
    rep = json.loads((out / "comparison.json").read_text()) if (out / "comparison.json").exists() else None
    return rc, rep


# ---------------------------------------------------------------------------------------------- fixtures


def test_committed_fixtures_match_the_generator():
    for name, detailed in (("vllm_bench_detailed.json", True), ("vllm_bench_summary_only.json", False)):
        committed = json.loads((DATA / name).read_text())
        assert committed == json.loads(json.dumps(make_fixture(detailed))), name
        assert committed["_note"].startswith("SYNTHETIC TEST FIXTURE")


# ---------------------------------------------------------------------------------------------- parsing


def test_detailed_file_parsed_exactly():
    res = load_vllm_bench(DATA / "vllm_bench_detailed.json")
    assert res.detailed and res.completed == 5 and res.failed == 1
    ok = res.ok
    assert list(ok["index"]) == [0, 1, 2, 4, 5]  # request 3 failed: excluded
    assert list(ok["output_tokens"]) == [4, 3, 1, 5, 2]
    assert ok["e2e_s"].tolist() == pytest.approx([0.16, 0.26, 0.30, 0.64, 0.57], abs=1e-12)
    r = real_metrics(res)
    assert r["ttft_s"]["mean"] == pytest.approx(0.3, abs=1e-12)
    assert r["ttft_s"]["p50"] == pytest.approx(0.3, abs=1e-12)
    # TPOT: request 2 (1 output token) has none; the others 20, 30, 60, 70 ms.
    assert r["tpot_s"]["mean"] == pytest.approx(0.045, abs=1e-12)
    assert r["itl_s"]["mean"] == pytest.approx(np.mean([.02] * 3 + [.03] * 2 + [.06] * 4 + [.07]), abs=1e-12)
    assert r["throughput"]["requests_per_s"] == pytest.approx(2.5)
    assert r["throughput"]["output_tokens_per_s"] == pytest.approx(7.5)
    # the file's own aggregates read back in seconds, median as p50
    assert res.file_metrics["ttft_s"]["mean"] == pytest.approx(0.3, abs=1e-12)
    assert res.file_metrics["e2e_s"]["p50"] == pytest.approx(0.30, abs=1e-12)
    assert res.file_metrics["tpot_s"]["p99"] == pytest.approx(r["tpot_s"]["p99"], abs=1e-12)


def test_summary_only_file_uses_the_file_aggregates():
    res = load_vllm_bench(DATA / "vllm_bench_summary_only.json")
    assert not res.detailed
    r = real_metrics(res)
    assert r["ttft_s"]["mean"] == pytest.approx(0.3, abs=1e-12)
    assert r["ttft_s"]["p90"] is None  # vLLM saves p99 only by default
    assert r["throughput"]["requests_per_s"] == pytest.approx(2.5)


# ---------------------------------------------------------------------------------------------- end to end


def test_compare_detailed_end_to_end(tmp_path, capsys):
    rc, rep = run_compare(tmp_path, DATA / "vllm_bench_detailed.json")
    assert rc == 0
    text = capsys.readouterr().out
    for word in ("TTFT", "TPOT", "ITL", "E2E", "request throughput", "output throughput", "1 failed (excluded)"):
        assert word in text
    assert rep["scope"] == "per-request distributions"
    assert rep["requests"]["real"] == {"recorded": 6, "completed": 5, "failed_excluded": 1}
    assert rep["requests"]["sim"]["completed"] == 5
    assert rep["setup"]["model"] == "llama-3.1-8b"  # resolved from model_id through the catalog aliases
    m = rep["metrics"]
    assert m["ttft_s"]["real"]["mean"] == pytest.approx(0.3, abs=1e-12)
    for key in ("ttft_s", "tpot_s", "itl_s", "e2e_s"):
        for s in ("mean", "p50", "p90", "p99"):
            real, sim, err = m[key]["real"][s], m[key]["sim"][s], m[key]["error"][s]
            assert sim is not None and sim > 0
            assert err == pytest.approx((sim - real) / real)
    assert rep["checks"]["tokens_per_chunk"] == pytest.approx(1.0)
    assert all(abs(v["rel_diff"]) < 1e-9 for v in rep["checks"]["detail_vs_file"].values())
    out = tmp_path / "cmp"
    for name in ("ttft", "tpot", "itl", "e2e"):
        assert (out / "plots" / f"cdf_{name}.png").stat().st_size > 1000
        assert (out / "plots" / f"cdf_{name}.svg").exists()
    # the workload went through the normal trace path: successful requests, their lengths
    lines = (out / "workload.csv").read_text().splitlines()
    assert lines[0].startswith("arrival_s,prompt_tokens,output_tokens")
    assert len(lines) == 6 and {ln.split(",")[3] for ln in lines[1:]} == {"0", "1", "2", "4", "5"}
    assert (out / "sim" / "summary.json").exists() and (out / "sim" / "requests.parquet").exists()


def test_compare_summary_only(tmp_path, capsys):
    rc, rep = run_compare(tmp_path, DATA / "vllm_bench_summary_only.json", "--model", "llama-3.1-8b")
    assert rc == 0
    assert rep["scope"].startswith("aggregate metrics only")
    assert any("summary-only" in n for n in rep["notes"])
    assert "mean lengths" in rep["workload"]["lengths"]
    assert rep["metrics"]["ttft_s"]["error"]["p90"] is None
    assert rep["metrics"]["ttft_s"]["error"]["mean"] is not None
    assert (tmp_path / "cmp" / "plots" / "cdf_ttft.png").exists()
    assert "summary-only" in capsys.readouterr().out


def test_arrival_trace_and_start_times(tmp_path):
    d = make_fixture()
    d["start_times"] = [100.0, 100.5, 101.0, 101.2, 101.5, 102.0]
    rc, rep = run_compare(tmp_path, write(tmp_path / "r.json", d), "--no-plots")
    assert rc == 0 and rep["workload"]["arrivals"].startswith("start_times")
    arr = [float(ln.split(",")[0]) for ln in (tmp_path / "cmp" / "workload.csv").read_text().splitlines()[1:]]
    assert arr == pytest.approx([0.0, 0.5, 1.0, 1.5, 2.0])
    trace = write(tmp_path / "t.csv", "arrival_s,prompt_tokens,output_tokens\n" + "".join(f"{0.25 * i},10,3\n" for i in range(6)))
    rc, rep = run_compare(tmp_path, DATA / "vllm_bench_detailed.json", "--no-plots", "--arrivals", str(trace))
    assert rc == 0 and rep["workload"]["arrivals"].startswith("trace t.csv")
    rows = [ln.split(",") for ln in (tmp_path / "cmp" / "workload.csv").read_text().splitlines()[1:]]
    assert [(float(r[0]), int(r[1])) for r in rows] == [(0.0, 64), (0.25, 128), (0.5, 32), (1.0, 256), (1.25, 16)]


def test_notes_for_weaker_comparisons(tmp_path):
    d = make_fixture()
    d.update(request_rate="inf", max_concurrency=2)
    d["itls"] = [g[:1] for g in d["itls"]]  # the server bundled tokens into fewer chunks
    cfg = write(tmp_path / "c.yaml", "hardware: h100-sxm\nworkload: {rate: 9, num_requests: 3}\n")
    out = tmp_path / "o"
    rc = main(["compare", str(write(tmp_path / "r.json", d)), str(cfg), "--out", str(out), "--no-plots",
               "--set", "scheduler.max_num_seqs=2"])
    rep = json.loads((out / "comparison.json").read_text())
    assert rc == 0 and rep["source"]["request_rate"] == "inf"
    assert rep["workload"]["arrivals"] == "request_rate inf: all requests at t = 0"
    notes = " | ".join(rep["notes"])
    assert "tokens per chunk" in notes and "workload keys ignored" in notes and "capped concurrency at 2" in notes
    assert rep["checks"]["tokens_per_chunk"] > 1
    assert {ln.split(",")[0] for ln in (out / "workload.csv").read_text().splitlines()[1:]} == {"0.0"}


def test_gamma_arrivals_follow_vllm():
    rng = np.random.default_rng(1)
    t = gamma_arrivals(20000, 4.0, 0.25, rng)
    gaps = np.diff(t)
    assert t[0] == 0 and np.all(gaps >= 0)
    assert gaps.mean() == pytest.approx(0.25, rel=0.01)  # scaled so request N lands at N / rate
    assert gaps.std() / gaps.mean() == pytest.approx(2.0, rel=0.05)  # CV = 1 / sqrt(burstiness)
    assert np.all(gamma_arrivals(5, math.inf, 1.0, rng) == 0)
    assert gamma_arrivals(4, 2.0, math.inf, rng) == pytest.approx([0, 0.5, 1.0, 1.5])


# ---------------------------------------------------------------------------------------------- bad files


def _bad(**changes):
    d = make_fixture()
    for k, v in changes.items():
        if v is KeyError:
            del d[k]
        else:
            d[k] = v
    return d


@pytest.mark.parametrize("content, expected", [
    ("", "empty file"),
    ("{not json", "not valid JSON"),
    ("[1, 2]", "expected a JSON object"),
    (_bad(duration=KeyError), "missing key 'duration'"),
    (_bad(completed="five"), "key 'completed': expected a number"),
    (_bad(ttfts=KeyError), "missing key 'ttfts'"),
    (_bad(itls=[[0.01]] * 5), "key 'itls': has 5 items but 'input_lens' has 6"),
    (_bad(itls=[[0.01], "x", [], [], [], []]), "key 'itls': item 1"),
    (_bad(output_lens=[4, 3, 1, 0, -5, 2]), "key 'output_lens': item 4"),
    (_bad(ttfts=[0.1, 0.2, "slow", 0, 0.4, 0.5]), "key 'ttfts': item 2"),
    (_bad(request_rate="fast"), "key 'request_rate'"),
    (_bad(input_lens={}), "key 'input_lens': expected a list"),
    (_bad(input_lens=[]), "key 'input_lens': is empty"),
    (_bad(errors=["boom"] * 6), "key 'errors': all 6 requests failed"),
])
def test_malformed_files_fail_with_one_message(tmp_path, capsys, content, expected):
    path = write(tmp_path / "bad.json", content)
    rc, rep = run_compare(tmp_path, path)
    err = capsys.readouterr().err
    assert rc == 2 and rep is None
    assert err.count("\n") == 1 and "Traceback" not in err
    assert str(path) in err and expected in err


def test_setup_errors_are_clear(tmp_path, capsys):
    d = make_fixture()
    d["model_id"] = "someone/unknown-model"
    rc = main(["compare", str(write(tmp_path / "r.json", d)), "--hardware", "h100-sxm", "--out", str(tmp_path / "o")])
    assert rc == 2 and "--model" in capsys.readouterr().err
    rc = main(["compare", str(DATA / "vllm_bench_detailed.json"), "--out", str(tmp_path / "o")])
    assert rc == 2 and "--hardware" in capsys.readouterr().err
    with pytest.raises(BenchFileError, match="no such file"):
        load_vllm_bench(tmp_path / "missing.json")


if __name__ == "__main__":  # rewrite the committed fixtures
    for name, detailed in (("vllm_bench_detailed.json", True), ("vllm_bench_summary_only.json", False)):
        write(DATA / name, make_fixture(detailed))
        print(f"wrote {DATA / name}")
