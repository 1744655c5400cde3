"""Engine overhead fitted from the engine (``servesim calibrate-engine``), the cost-model terms it
fits, robust profile timing, fp32 and sampling, and the calibration fixes of issue 25.

The end-to-end check times a real engine servesim did not write (Hugging Face transformers
``generate`` on a random-weight Llama built in code) and bounds the held-out error with margin for
a noisy shared machine; the tight figures come from experiments/bench/engine_calibration_cpu.py."""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from calibration.engine import (EngineCalibrationError, alternate, errors, fit_terms, nnls, parse_holdout,
                                read_static)
from sim.catalog import CatalogError, get_hardware, get_model
from sim.cost.roofline import RooflineCostModel, RooflineParams
from sim.types import BatchShape

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "calibration" / "cards" / "llama-tiny.yaml"
CPU_CARD = ROOT / "calibration" / "cards" / "cpu-host.yaml"


# ---------------------------------------------------------------------- the fit

def test_nnls_exact_and_nonnegative():
    A = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    assert np.allclose(nnls(A, A @ np.array([2.0, 3.0])), [2.0, 3.0])
    # the unconstrained solution has a negative coefficient: it is clamped to 0, the other refitted
    x = nnls(A, np.array([1.0, -1.0, 0.0]))
    assert x[1] == 0.0 and x[0] == pytest.approx(0.5)


def test_fit_terms_recovers_known_overhead():
    theta = np.array([2e-3, 1e-4, 3e-5, 2e-8])
    eqs = []
    for b in (1, 2, 4, 8):
        for p in (32, 128, 512):
            for x, k in (((1.0, b, b * p, b * p), 1e-3 * b * p / 64), ((1.0, b, b, b * (p + 4.5)), 2e-4 * b)):
                eqs.append({"metric": "m", "x": x, "kernels": k, "measured": k + float(np.dot(x, theta))})
    got = fit_terms(eqs)
    assert np.allclose(got, theta, rtol=1e-6, atol=1e-12)
    assert errors(eqs, got)["m"]["max_ape"] < 1e-9


def test_static_csv_errors_name_file_line_and_column(tmp_path):
    f = tmp_path / "t.csv"
    f.write_text("batch,prompt_tokens,output_tokens,first_token_s\n1,2,3,4\n")
    with pytest.raises(EngineCalibrationError, match=r"t.csv: line 1: missing column\(s\) per_token_s"):
        read_static(f)
    f.write_text("batch,prompt_tokens,output_tokens,first_token_s,per_token_s\n1,32,9,0.01,0.005\n2,x,9,0.01,0.005\n")
    with pytest.raises(EngineCalibrationError, match=r"t.csv: line 3: column prompt_tokens: 'x' is not a number"):
        read_static(f)
    f.write_text("batch,prompt_tokens,output_tokens,first_token_s,per_token_s\n1,32,1,0.01,0.005\n")
    with pytest.raises(EngineCalibrationError, match=r"line 2: column output_tokens: needs at least 2"):
        read_static(f)
    f.write_text("batch,prompt_tokens,output_tokens,first_token_s,per_token_s\n1,0,4,0.01,0.005\n")
    with pytest.raises(EngineCalibrationError, match=r"line 2: column prompt_tokens: must be positive, got 0"):
        read_static(f)
    f.write_text("batch,prompt_tokens,output_tokens,first_token_s,per_token_s,engine\n2,32,4,0.01,0.005,hf\n")
    assert read_static(f) == [{"line": 2, "batch": 2, "prompt_tokens": 32, "output_tokens": 4, "first_token_s": 0.01,
                               "per_token_s": 0.005}]


def test_holdout_alternates_shapes_and_names_unknown_ones():
    rows = [{"batch": b, "prompt_tokens": p} for b in (1, 2, 4) for p in (32, 128)]
    assert alternate(rows) == [False, True, True, False, False, True]  # a checkerboard on the full grid
    assert parse_holdout("2:32,4:128", rows) == [False, False, True, False, False, True]
    with pytest.raises(EngineCalibrationError, match="no row of shape 3:32"):
        parse_holdout("3:32", rows)


# ---------------------------------------------------------------------- the cost-model terms

def _model(**p):
    return RooflineCostModel(get_model("llama-3.1-8b"), get_hardware("h100-sxm"), params=RooflineParams(**p))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 300), st.integers(0, 4000)), min_size=1, max_size=12),
       st.floats(0, 1e-3), st.floats(0, 1e-4), st.floats(0, 1e-5), st.floats(0, 1e-7))
def test_host_terms_priced_as_stated(seqs, a, b, d, c):
    """cpu = step + per_seq n + per_token T + per_seq_ctx kv (kv: contexts after the step), the
    rest of the step unchanged; decode_total agrees with decode_step."""
    shape = BatchShape(tuple(q for q, _ in seqs), tuple(x for _, x in seqs))
    base = _model(cpu_step_s=0.0, cpu_per_seq_s=0.0).step_time(shape)
    got = _model(cpu_step_s=a, cpu_per_seq_s=b, cpu_per_token_s=d, cpu_per_seq_ctx_s=c).step_time(shape)
    n, T, kv = len(seqs), sum(q for q, _ in seqs), sum(q + x for q, x in seqs)
    assert got.cpu == pytest.approx(a + b * n + d * T + c * kv, rel=1e-12, abs=1e-18)
    assert got.total - got.cpu == pytest.approx(base.total - base.cpu, rel=1e-12)
    m = _model(cpu_per_token_s=d, cpu_per_seq_ctx_s=c)
    kv_tokens = sum(x + 1 for _, x in seqs)
    longest = max(x for _, x in seqs) + 1
    assert m.decode_total(n, kv_tokens, longest) == m.decode_step(n, kv_tokens, longest).total


def test_growing_terms_turn_off_the_constant_cpu_decode_series():
    assert _model().decode_totals(4, 400, 101, 10) is not None
    assert _model(cpu_per_seq_ctx_s=1e-8).decode_totals(4, 400, 101, 10) is None
    assert _model(cpu_per_token_s=1e-6).decode_series(4, 400, 101, 10) is None


def test_sampling_greedy_reads_the_logits_once():
    card, hw = get_model("llama-3.1-8b"), get_hardware("h100-sxm")
    rnd = RooflineCostModel(card, hw, params=RooflineParams(kernel_floor_s=0.0)).sampling(64)
    gr = RooflineCostModel(card, hw, params=RooflineParams(kernel_floor_s=0.0), sampling="greedy").sampling(64)
    assert gr == pytest.approx(rnd / 3)
    with pytest.raises(ValueError, match="sampling must be one of"):
        RooflineCostModel(card, hw, sampling="beam")


# ---------------------------------------------------------------------- config and errors

def test_hardware_cpu_points_to_the_test_card():
    with pytest.raises(CatalogError, match="calibration/cards/cpu-host.yaml"):
        get_hardware("cpu")
    assert get_hardware(str(CPU_CARD)).id == "cpu"


def test_fp32_without_a_profile_is_a_config_error(tmp_path):
    from sim.api import simulate
    from sim.errors import ConfigError

    with pytest.raises(ConfigError, match="dtype fp32: priced only from a profile"):
        simulate(None, overrides=["dtype=fp32", "workload.num_requests=2", f"cost.profiles_dir={tmp_path}",
                                  "cost.model=roofline"], plots=False, progress=False)


def test_cli_exit_code_2_for_fp32_without_profile(tmp_path):
    import subprocess

    r = subprocess.run([sys.executable, "-m", "sim.cli", "run", "--set", "dtype=fp32", "--set", "cost.model=roofline",
                        "--set", "workload.num_requests=2", "--out", str(tmp_path / "r")],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2 and "dtype fp32" in r.stderr and r.stderr.count("\n") <= 2


# ---------------------------------------------------------------------- timing

def _scripted_clock(durations_us):
    """A clock whose successive timed regions last ``durations_us`` (read twice per region)."""
    durs, state = iter(durations_us), {"t": 0.0, "open": False}

    def clock():
        if state["open"]:
            state["t"] += next(durs) * 1e-6
        state["open"] = not state["open"]
        return state["t"]

    return clock


def test_measure_repeats_until_the_spread_is_small():
    torch = pytest.importorskip("torch")
    from kernels.timing import TimingConfig, measure

    cfg = TimingConfig(warmup=1, repeats=5, min_repeats=5, max_seconds=10.0, flush_l2=False, target_spread=0.1,
                       max_repeats=40)
    cpu = torch.device("cpu")
    # the first five repeats take 1..5 us (spread 1.6): more batches of five follow, all 3 us
    s = measure(lambda: None, cpu, cfg, clock=_scripted_clock([1, 2, 3, 4, 5] + [3] * 100))
    assert s.time_us == pytest.approx(3.0) and s.spread <= 0.1 and s.repeats in (10, 15, 20)
    s = measure(lambda: None, cpu, cfg, clock=_scripted_clock([2] * 100))  # steady: no extra repeats
    assert s.repeats == 5 and s.spread < 1e-9
    s = measure(lambda: None, cpu, cfg, clock=_scripted_clock([1, 9] * 100))  # never settles: capped
    assert s.repeats == 40 and s.spread > 1


def test_load_warning_threshold():
    from kernels.load import load_warning

    assert load_warning({"loadavg": [1.9, 1, 1], "cpus": 2}, "profile", "process_time") is None
    w = load_warning({"loadavg": [11.0, 9, 8], "cpus": 2}, "profile", "process_time")
    assert "load average 11.0 on 2 CPU(s)" in w and "5.5 per CPU" in w
    assert load_warning({"loadavg": None, "cpus": 2}, "profile", "perf_counter") is None


# ---------------------------------------------------------------------- fitted values and --set

def _fake_fitted(folder: Path, hw="cpu", model="llama-tiny"):
    folder.mkdir(parents=True)
    np.savez(folder / "tables.npz", **{"gemm|fp32|1|qkv|x": np.array([1.0, 8.0]), "gemm|fp32|1|qkv|t": np.array([1e-5, 2e-5])})
    (folder / "meta.json").write_text(json.dumps({"hardware_id": hw, "model": model, "dtypes": ["fp32"]}))
    (folder / "roofline_params.json").write_text(json.dumps({"params": {"gemm_eff": 0.5},
                                                             "by_dtype": {"fp32": {"params": {"gemm_eff": 0.25}}}}))
    (folder / "overhead.json").write_text(json.dumps({"params": {"cpu_step_s": 0.5, "cpu_per_seq_s": 0.1}}))
    (folder / "engine_overhead.json").write_text(json.dumps({"params": {"cpu_step_s": 0.004, "cpu_per_token_s": 2e-5}}))


def test_fitted_params_precedence_and_user_wins(tmp_path):
    from sim.cost.profiled import fitted_params

    f = tmp_path / "cpu" / "llama-tiny"
    _fake_fitted(f)
    p, src = fitted_params(f, RooflineParams(), "fp32")
    assert (p.gemm_eff, p.cpu_step_s, p.cpu_per_seq_s, p.cpu_per_token_s) == (0.25, 0.004, 0.1, 2e-5)
    assert src["cpu_step_s"] == "engine_overhead.json" and src["cpu_per_seq_s"] == "overhead.json"
    p, src = fitted_params(f, RooflineParams(cpu_step_s=0.002), "fp32", user=("cpu_step_s",))
    assert p.cpu_step_s == 0.002 and src["overridden"]["cpu_step_s"]["fitted"] == 0.004


def test_set_wins_over_fitted_overhead_with_a_warning(tmp_path):
    from sim.config import load_config
    from sim.cost import make_cost_model
    from sim.errors import ServesimWarning

    _fake_fitted(tmp_path / "cpu" / "llama-tiny")
    sets = [f"model={TINY}", f"hardware={CPU_CARD}", f"cost.profiles_dir={tmp_path}", "dtype=fp32"]
    cfg = load_config(None, sets)
    cm = make_cost_model(cfg, get_model(str(TINY)), get_hardware(str(CPU_CARD)))
    assert cm.source == "profiled" and cm.p.cpu_step_s == 0.004 and cm.act_dtype == "fp32"
    assert cm.params_source.endswith("host overhead from engine_overhead.json and overhead.json")
    cfg = load_config(None, sets + ["cost.roofline.cpu_step_s=0.001"])
    with pytest.warns(ServesimWarning, match=r"cpu_step_s=0.001 \(fitted 0.004 in engine_overhead.json\)"):
        cm = make_cost_model(cfg, get_model(str(TINY)), get_hardware(str(CPU_CARD)))
    assert cm.p.cpu_step_s == 0.001 and cm.p.cpu_per_token_s == 2e-5
    meta = tmp_path / "cpu" / "llama-tiny" / "meta.json"  # a profile taken under load: said at every run
    meta.write_text(json.dumps({**json.loads(meta.read_text()), "profile": {"warnings": ["taken at load 9"]}}))
    with pytest.warns(ServesimWarning, match=r"the profile behind .*llama-tiny: taken at load 9"):
        make_cost_model(load_config(None, sets), get_model(str(TINY)), get_hardware(str(CPU_CARD)))


def test_kerneldb_rejects_the_growing_terms():
    from sim.config import load_config
    from sim.cost import make_cost_model
    from sim.cost.kerneldb_data import package_root
    from sim.errors import ConfigError

    if package_root() is None:
        pytest.skip("aiconfigurator-core (extra kernels-db) not installed")
    cfg = load_config(None, ["cost.model=kerneldb", "cost.roofline.cpu_per_token_s=1e-6"])
    with pytest.raises(ConfigError, match="cost.roofline.cpu_per_token_s"):
        make_cost_model(cfg, get_model(cfg.model), get_hardware(cfg.hardware))


# ---------------------------------------------------------------------- fit with a card given by path

def test_fit_with_a_card_by_path(tmp_path):
    from calibration.fit import FitError, fit

    card = tmp_path / "cards" / "my-llama.yaml"
    card.parent.mkdir()
    card.write_text(TINY.read_text().replace("id: llama-tiny", "id: my-llama"))
    prof = tmp_path / "profiles" / "cpu" / "my-llama"
    prof.mkdir(parents=True)
    (prof / "gemm.csv").write_text("dtype,tp,op,tokens,groups,m,n,k,time_us,time_us_p10,time_us_p90,repeats\n"
                                   + "".join(f"fp32,1,qkv,{t},1,{t},512,256,{5 + t * 0.5},{5 + t * 0.5},{5 + t * 0.5},3\n"
                                             for t in (1, 2, 4, 8, 16, 32, 64)))
    meta = {"hardware_id": "cpu", "model": "my-llama", "model_card": str(tmp_path / "moved" / "my-llama.yaml")}
    (prof / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(FitError, match="give it with --model PATH/TO/my-llama.yaml"):
        fit(prof, tmp_path / "fitted")
    with pytest.raises(FitError, match="is 'llama-tiny' but the profile .* is of 'my-llama'"):
        fit(prof, tmp_path / "fitted", model=str(TINY))
    dest = fit(prof, tmp_path / "fitted", model=str(card))
    params = json.loads((dest / "roofline_params.json").read_text())["by_dtype"]["fp32"]["params"]
    assert set(params) >= {"gemm_eff", "mem_eff", "kernel_floor_s"}
    assert json.loads((dest / "meta.json").read_text())["model_card"] == str(card.resolve())
    meta["model_card"] = str(card)  # the profile recorded where the card is: found without --model
    (prof / "meta.json").write_text(json.dumps(meta))
    assert fit(prof, tmp_path / "fitted2").is_dir()


# ---------------------------------------------------------------------- end to end, a real engine

FIRST_TOKEN_BOUND = 0.30  # held-out median; 8.2% in one run under load 2.8 on 2 cores (docs/calibration.md)
PER_TOKEN_BOUND = 0.45  # held-out median; 17.5% in that run (6 tokens, 2 repeats); the bench prints the tight figures


@pytest.fixture(scope="module")
def fp32_fitted(tmp_path_factory):
    """llama-tiny profiled in fp32 on the CPU (small grid, one thread, process time) and fitted."""
    torch = pytest.importorskip("torch")
    from calibration.fit import fit
    from kernels.profile import run as profile

    tmp = tmp_path_factory.mktemp("fp32")
    torch.set_num_threads(1)
    folder = profile("cpu", str(TINY), [1], ["fp32"], "small", tmp / "profiles", progress=False,
                     families=("gemm", "attn_prefill", "attn_decode", "elementwise", "sampling"))
    return folder, fit(folder, tmp / "fitted")


@pytest.fixture(scope="module")
def fp32_contiguous(fp32_fitted, tmp_path_factory):
    """The fp32 profile with its decode attention timed as transformers runs it
    (``attention="contiguous"``: SDPA over a contiguous cache): the other families' rows are
    reused, only attn_decode is profiled again; then fitted."""
    import shutil

    from calibration.fit import fit
    from kernels.profile import run as profile

    folder, _ = fp32_fitted
    tmp = tmp_path_factory.mktemp("fp32c")
    dest = tmp / "profiles" / folder.parent.name / folder.name
    shutil.copytree(folder, dest, ignore=shutil.ignore_patterns("attn_decode.csv"))
    out = profile("cpu", str(TINY), [1], ["fp32"], "small", tmp / "profiles", progress=False,
                  families=("attn_decode",), attention="contiguous")
    assert out == dest
    return out, fit(out, tmp / "fitted")


def test_profiled_sampling_uses_the_rows_of_its_method(fp32_fitted):
    from sim.cost.profiled import load_profiled_cost_model, load_tables

    _, fitted = fp32_fitted
    card, hw = get_model(str(TINY)), get_hardware(str(CPU_CARD))
    tables = load_tables(fitted)
    for method in ("greedy", "random"):
        cm = load_profiled_cost_model(card, hw, profiles_dir=str(fitted), dtype="fp32", act_dtype="fp32",
                                      sampling=method)
        tab = tables[f"sampling|fp32|1|{method}"]
        assert cm.sampling(4) == pytest.approx(tab(4))


def test_validate_fp32_end_to_end(fp32_fitted, tmp_path):
    """``servesim validate --dtype fp32``: fp32 plans simulated from the fp32 tables and replayed."""
    import argparse

    from calibration.validate import add_arguments, run

    _, fitted = fp32_fitted
    ap = argparse.ArgumentParser()
    add_arguments(ap)
    res = run(ap.parse_args(["--fitted", str(fitted), "--device", "cpu", "--model", str(TINY), "--dtype", "fp32",
                             "--max-steps", "12", "--repeats", "2", "--out", str(tmp_path / "val")]))
    v = json.loads((tmp_path / "val" / "validation.json").read_text())
    assert v["meta"]["dtype"] == "fp32" and v["plans"]["source"] == "profiled" and v["plans"]["steps"] == 12
    assert v["device"]["clock"] == "process_time" and v["device"]["host_load"]["end"]["cpus"] >= 1
    assert 0 <= res["step"]["median_ape"] < 10


def test_transformers_generate_calibrated_and_predicted(fp32_fitted, fp32_contiguous, tmp_path, monkeypatch):
    """Time transformers ``generate`` on static batches (process time, one thread) of a
    random-weight Llama of llama-tiny's architecture, calibrate the engine overhead on some
    shapes against the fp32 profile whose decode attention is the one transformers runs (SDPA
    over a contiguous cache) and predict the others."""
    pytest.importorskip("transformers")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from calibration import static_batch
    from calibration.engine import add_arguments, report, run
    from kernels.timing import cpu_clock

    folder, _ = fp32_fitted
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["timing"]["clock"] == "process_time" and meta["host_load"]["start"]["cpus"] >= 1
    assert set(meta["spread"]["families"]) == {"gemm", "attn_prefill", "attn_decode", "elementwise", "sampling"}
    cfolder, fitted = fp32_contiguous
    cmeta = json.loads((cfolder / "meta.json").read_text())
    assert cmeta["attention"] == "contiguous" and cmeta["runs"][-1]["families"] == ["attn_decode"]
    model = static_batch.build_model(get_model(str(TINY)), "fp32")
    shapes = [(b, p) for b in (1, 2, 4, 8) for p in (32, 128)]
    rows = static_batch.time_shapes(model, shapes, output_tokens=6, repeats=2, clock=cpu_clock(1)[1])
    csv_path = static_batch.write_csv(rows, tmp_path / "times.csv")
    import argparse

    ap = argparse.ArgumentParser()
    add_arguments(ap)
    doc = run(ap.parse_args(["--fitted", str(fitted), "--static", str(csv_path), "--sampling", "greedy",
                             "--out", str(tmp_path / "engine"),
                             "--note", "transformers generate, tiny random Llama, fp32, 1 thread"]))
    print("\n" + report(doc), file=sys.stderr)
    stored = json.loads((tmp_path / "engine" / "engine_overhead.json").read_text())
    assert (tmp_path / "engine" / "tables.npz").is_file()  # a copy of the fitted folder, with the terms
    assert stored["provenance"]["kind"] == "static-batch table" and stored["provenance"]["files"][0]["sha256"]
    assert stored["provenance"]["cost_model"]["decode_attention"] == "contiguous"
    assert sum(r["held_out"] for r in stored["rows"]) == 8  # 4 of 8 shapes, two metrics each
    assert all(v >= 0 for v in stored["params"].values())
    held = doc["error"]["held_out_rows"]
    assert held["first_token_s"]["n"] == 4 and held["per_token_s"]["n"] == 4
    # the fit must beat the kernels alone, and stay within the noisy-machine bounds
    kern = doc["kernels_only_error"]["held_out_rows"]
    assert held["per_token_s"]["median_ape"] < kern["per_token_s"]["median_ape"]
    assert held["first_token_s"]["median_ape"] < FIRST_TOKEN_BOUND
    assert held["per_token_s"]["median_ape"] < PER_TOKEN_BOUND
    assert math.isfinite(held["first_token_s"]["max_ape"])


# ---------------------------------------------------------------------- vllm bench serve input

def test_vllm_bench_rows_fitted_by_simulation(tmp_path):
    """Benchmark files whose means were made by simulating a known overhead: the fit brings the
    held-out file within a few percent and reports every row."""
    import argparse

    from calibration.engine import add_arguments, run
    from sim.compare import _sim_config, _simulate
    from sim.compare.metrics import sim_metrics
    from sim.compare.vllm_bench import load_vllm_bench
    from sim.compare.workload import rebuild, write_workload

    fitted = tmp_path / "cpu" / "llama-tiny"
    _fake_fitted(fitted)
    for f in ("overhead.json", "engine_overhead.json"):
        (fitted / f).unlink()
    template = json.loads((ROOT / "tests" / "data" / "vllm_bench_summary_only.json").read_text())
    sets = [f"model={TINY}", f"hardware={CPU_CARD}", "dtype=fp32"]
    truth = [f"cost.roofline.cpu_step_s={2e-3}", f"cost.roofline.cpu_per_seq_s={3e-4}"]
    files = []
    for i, (rate, n, tin, tout) in enumerate(((2.0, 12, 600, 96), (8.0, 16, 1600, 256), (4.0, 14, 2100, 140))):
        doc = {**template, "request_rate": rate, "num_prompts": n, "completed": n, "failed": 0, "duration": n / rate,
               "total_input_tokens": tin, "total_output_tokens": tout}
        path = tmp_path / f"bench{i}.json"
        path.write_text(json.dumps(doc))
        res = load_vllm_bench(path)
        csv_path = write_workload(rebuild(res, seed=0), tmp_path / f"w{i}.csv")
        cfg = _sim_config(None, sets + truth + ["cost.model=profiled", f"cost.profiles_dir={fitted}"], res, csv_path, [])
        summary, req, itl = _simulate(cfg, tmp_path / f"truth{i}")
        m = sim_metrics(req, itl, summary)
        doc["mean_ttft_ms"], doc["mean_tpot_ms"] = m["ttft_s"]["mean"] * 1e3, m["tpot_s"]["mean"] * 1e3
        path.write_text(json.dumps(doc))
        files.append(str(path))
    ap = argparse.ArgumentParser()
    add_arguments(ap)
    out = run(ap.parse_args(["--fitted", str(fitted), "--vllm-bench", *files, *sum((["--set", s] for s in sets), []),
                             "--out", str(tmp_path / "out")]))
    assert [r["held_out"] for r in out["rows"]] == [False, False, True, True, False, False]
    held = out["error"]["held_out_rows"]
    assert held["tpot_mean_s"]["median_ape"] < 0.05 and held["ttft_mean_s"]["median_ape"] < 0.10
    assert out["kernels_only_error"]["held_out_rows"]["tpot_mean_s"]["median_ape"] > 0.2
    stored = json.loads((tmp_path / "out" / "engine_overhead.json").read_text())
    assert stored["provenance"]["kind"] == "vllm bench serve" and len(stored["provenance"]["files"]) == 3
    assert not (fitted / "engine_overhead.json").exists()  # --out: the input folder is left as it was


@pytest.mark.parametrize("term", ["cpu_per_token_s=2e-6", "cpu_per_seq_ctx_s=3e-9"])
def test_growing_terms_same_results_with_and_without_fast_forward(term):
    """A host term per token or context token is priced step by step on every path: the decode
    fast-forward gives the same results as stepping."""
    from sim.api import simulate

    sets = ["cost.model=roofline", f"cost.roofline.{term}", "workload.num_requests=60", "workload.rate=8"]
    a = simulate(None, overrides=sets, plots=False, progress=False)
    b = simulate(None, overrides=sets + ["engine.fast_forward=false"], plots=False, progress=False)
    base = simulate(None, overrides=sets[:1] + sets[2:], plots=False, progress=False)
    for k in ("ttft_s", "tpot_s", "e2e_s"):
        assert a.summary[k] == b.summary[k]
    assert a.summary["tpot_s"]["mean"] > base.summary["tpot_s"]["mean"]  # every decode step costs more


def test_calibrate_engine_cli_errors_exit_2(tmp_path):
    import subprocess

    fitted = tmp_path / "cpu" / "llama-tiny"
    _fake_fitted(fitted)
    bad = tmp_path / "t.csv"
    bad.write_text("batch,prompt_tokens,output_tokens,first_token_s,per_token_s\n1,32,9,0.01,-1\n")
    for extra, msg in ((["--static", str(bad)], "t.csv: line 2: column per_token_s: must be positive"),
                       ([], "give the engine's measurements")):
        r = subprocess.run([sys.executable, "-m", "sim.cli", "calibrate-engine", "--fitted", str(fitted), *extra],
                           capture_output=True, text=True, cwd=ROOT)
        assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and msg in r.stderr, r.stderr
