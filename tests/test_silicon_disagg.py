"""The disaggregated rows of ``validate-silicon`` (``--modes disagg``; sim/compare/silicon.py):
which rows are replayed and why the others are not, each side's placement, the pools each row
becomes, the client-side first token streamed from the decode worker (an exact hand-made case),
and the command end to end."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from conftest import tiny_config
from sim.catalog import get_hardware, get_model
from sim.cli import main
from sim.compare import silicon
from sim.config import load_config
from sim.cost import kerneldb_data as kd
from sim.cost.roofline import RooflineCostModel
from sim.types import BatchShape

needs_db = pytest.mark.skipif(kd.package_root() is None, reason="aiconfigurator-core (a dependency) is not installed")

DUMP = "db-dump/2026-04-27; config_id=374; silicon_concurrency=135; measured=2026-01-01"


def drow(**kw) -> dict:
    """A disaggregated csv row as the database dump records one (DeepSeek-R1 on GB200, TRT-LLM):
    one prefill worker of 4 attention-DP ranks with EP 4, 15 decode workers of TP 4 with EP 4."""
    base = {"id": "dsr1_gb200_trtllm_fp4_disagg_1024x8192_c135_cfg374", "silicon_data_source": DUMP,
            "backend": "trtllm", "model_path": "deepseek-ai/DeepSeek-V3", "system": "gb200", "precision": "fp4",
            "mode": "disagg", "isl": 1024, "osl": 8192,
            "prefill_num_workers": 1.0, "prefill_tp_size": 1.0, "prefill_pp_size": 1.0,
            "prefill_attention_dp_size": 4.0, "prefill_moe_tp_size": 1.0, "prefill_moe_ep_size": 4.0,
            "prefill_batch_size": 1.0,
            "decode_num_workers": 15.0, "decode_tp_size": 4.0, "decode_pp_size": 1.0,
            "decode_attention_dp_size": 1.0, "decode_moe_tp_size": 1.0, "decode_moe_ep_size": 4.0,
            "decode_batch_size": 9.0, "silicon_ttft_ms": 100.0, "silicon_tpot_ms": 10.0}
    return base | kw


def test_each_sides_placement_and_the_concurrency():
    r = drow()
    assert silicon.disagg_placement(r, "prefill") == (1, 1, 4, 4)
    assert silicon.disagg_placement(r, "decode") == (15, 4, 4, 1)
    assert silicon.disagg_concurrency(r) == 135
    # no silicon_concurrency recorded: decode batch x decode workers x decode ranks
    assert silicon.disagg_concurrency(drow(silicon_data_source="source_file=x.csv", decode_attention_dp_size=2.0)) \
        == 9 * 15 * 2
    assert silicon.disagg_placement(drow(prefill_num_workers=float("nan")), "prefill") is None


def test_select_disagg_dedups_to_the_copy_with_workers_and_counts_every_skip():
    bare = drow(id="2026_03_25_deepseek_r1_gb200_trtllm_fp4_disagg_1024x8192_c135_tp4_0_ep4_0_1",
                silicon_data_source="source_file=2026-03-25.csv; model=DeepSeek-R1; silicon_concurrency=135",
                prefill_num_workers=float("nan"), decode_num_workers=float("nan"), model_path="deepseek-ai/DeepSeek-R1")
    other = drow(id="x", silicon_ttft_ms=55.0, prefill_num_workers=float("nan"), decode_num_workers=float("nan"))
    split = drow(id="y", silicon_ttft_ms=66.0, decode_moe_ep_size=2.0)  # 1 x 2 is not the 4 GPUs of the worker
    agg = {**drow(id="z"), "mode": "agg"}
    rows, skipped = silicon.select(pd.DataFrame([bare, drow(), other, split, agg]), mode="disagg")
    assert list(rows["id"]) == [drow()["id"]]  # the database dump's copy, which records the workers
    r = rows.iloc[0]
    assert r["model"] == "deepseek-r1" and r["hardware"] == "gb200" and r["dtype"] == "nvfp4"
    assert (r["p_workers"], r["p_tp"], r["p_ep"], r["p_dp"]) == (1, 1, 4, 4)
    assert (r["d_workers"], r["d_tp"], r["d_ep"], r["d_dp"], r["concurrency"]) == (15, 4, 4, 1, 135)
    assert sum(skipped.values()) == 3 and len(rows) + sum(skipped.values()) == 4
    assert any(k.startswith("duplicate") for k in skipped) and any(k.startswith("worker counts") for k in skipped)
    assert any(k.startswith("MoE split") for k in skipped)


def test_a_row_becomes_a_prefill_pool_and_a_decode_pool():
    rows, _ = silicon.select(pd.DataFrame([drow()]), mode="disagg")
    cfg = silicon.row_config(rows.iloc[0].to_dict(), "roofline", silicon.CLIENTS["bench-serving"])
    assert cfg["cluster"]["pools"] == [
        {"name": "prefill", "hardware": "gb200", "role": "prefill", "replicas": 1,
         "parallelism": {"tp": 1, "ep": 4, "dp": 4}},
        {"name": "decode", "hardware": "gb200", "role": "decode", "replicas": 15,
         "parallelism": {"tp": 4, "ep": 4, "dp": 1}, "scheduler": {"max_num_seqs": 8}}]  # its recipe's batch8
    assert "parallelism" not in cfg
    c = load_config(cfg)  # a valid config: the model fits each pool's GPUs
    assert c.cluster.replicas == 16 and c.workload.closed_loop.clients == 135


def recipe_row(conc: int, **kw) -> dict:
    rows, _ = silicon.select(pd.DataFrame([drow(silicon_data_source=f"db-dump/2026-04-27; config_id=374; "
                                                                    f"silicon_concurrency={conc}", **kw)]), mode="disagg")
    return rows.iloc[0].to_dict()


def test_an_inferencemax_row_gets_its_recipes_decode_batch():
    """GB200 fp4 1k/8k, one DEP4 prefill worker and 15 TEP4 decode workers: InferenceMAX ran
    ctx1_gen15_tep4_batch4 at 60 clients and ..._batch8 at 135 (disagg_launch.DECODE_BATCH); a
    concurrency no recipe lists, another provenance or an attention-DP decode side get none."""
    from sim.compare import disagg_launch as dl

    assert silicon.disagg_limits(recipe_row(135)) == ({}, {"max_num_seqs": 8})
    assert silicon.disagg_limits(recipe_row(60)) == ({}, {"max_num_seqs": 4})
    assert silicon.disagg_limits(recipe_row(61)) == ({}, {})
    assert silicon.disagg_limits(recipe_row(135, backend="sglang")) == ({}, {})
    assert silicon.disagg_limits(recipe_row(135, model_path="moonshotai/Kimi-K2.5")) == ({}, {})  # not read
    r1 = "deepseek-r1"
    assert dl.recipe_decode_batch(r1, "gb200", "fp4", 1024, 8192, (1, 1, 4), (15, 4, 2), 135) is None  # decode DP
    assert dl.recipe_decode_batch(r1, "gb200", "fp4", 1024, 8192, (1, 4, 1), (15, 4, 1), 135) is None  # TEP prefill
    assert dl.recipe_decode_batch(r1, "gb300", "fp8", 1024, 1024, (1, 1, 4), (4, 8, 1), 24) == 4
    pools = silicon.disagg_pools(recipe_row(61))
    assert all("scheduler" not in p for p in pools)


def test_inferencemax_trtllm_decode_pools_price_experts_from_the_trtllm_gen_rows():
    """InferenceMAX's DeepSeek-R1 TRT-LLM decode workers without attention DP run the TRTLLM MoE
    backend (trtllm-gen): fp8 on any Blackwell system and nvfp4 on GB300 take vLLM's FlashInfer
    trtllm-gen rows (TRT-LLM's collection times DeepGEMM fp8 and, on GB300, CUTLASS nvfp4 only); the
    prefill pool, nvfp4 on GB200 (TRT-LLM's own trtllm-gen rows), attention-DP decode, Hopper, other
    models and other provenances keep the framework's table."""
    from sim.compare import disagg_launch as dl

    def tables(**kw):
        return [p.get("moe_table") for p in silicon.disagg_pools(recipe_row(135, **kw))]
    assert tables() == [None, None]  # gb200 nvfp4
    assert tables(precision="fp8") == [None, "vllm"]
    assert tables(system="gb300") == [None, "vllm"]
    assert tables(system="b200_sxm", precision="fp8") == [None, "vllm"]
    assert tables(system="h200_sxm", precision="fp8") == [None, None]
    assert tables(precision="fp8", decode_attention_dp_size=2.0, decode_tp_size=2.0) == [None, None]
    assert tables(precision="fp8", backend="sglang") == [None, None]
    assert tables(precision="fp8", model_path="moonshotai/Kimi-K2.5") == [None, None]
    gap = {**recipe_row(135, precision="fp8"), "silicon_data_source": "/aic-auto-gap-analysis/run; silicon_concurrency=135"}
    assert not silicon.inferencemax(gap) and [p.get("moe_table") for p in silicon.disagg_pools(gap)] == [None, None]
    assert dl.decode_moe_table("deepseek-r1", "gb300", "fp4", 1) == "vllm"
    assert dl.decode_moe_table("deepseek-r1", "b200_sxm", "fp4", 1) is None


@needs_db
def test_a_pools_own_moe_table_prices_only_that_pools_experts(tmp_path, monkeypatch):
    """``cluster.pools[i].moe_table``: the decode pool's routed experts from vLLM's trtllm-gen rows, the
    prefill pool's from TRT-LLM's DeepGEMM rows (as a run whose cost.moe_table is that table gives);
    a value that names no collection is one line naming the pool's key."""
    from sim.cluster.pools import fleet, pool_parts
    from sim.errors import ConfigError

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    base = {"model": "deepseek-r1", "hardware": "b200", "dtype": "fp8", "kv": {"dtype": "fp8"},
            "cost": {"model": "kerneldb", "framework": "trtllm"}, "workload": {"num_requests": 1}}
    par = {"tp": 8, "ep": 8}
    cfg = load_config({**base, "cluster": {"pools": [
        {"name": "p", "hardware": "b200", "role": "prefill", "parallelism": par},
        {"name": "d", "hardware": "b200", "role": "decode", "parallelism": par, "moe_table": "vllm"}]}})
    pools = fleet(cfg)
    parts = pool_parts(pools, get_model("deepseek-r1"), True)
    pre, dec = (parts[p.key][2] for p in pools)
    one = lambda table: __import__("sim.cost", fromlist=["make_cost_model"]).make_cost_model(  # noqa: E731
        load_config({**base, "parallelism": par, "cost": {**base["cost"], "moe_table": table}}),
        get_model("deepseek-r1"), get_hardware("b200"))
    for t in (1, 8, 256):
        assert dec.moe(t) == one("vllm").moe(t) and pre.moe(t) == one("framework").moe(t)
    assert dec.moe(8) != pre.moe(8) and pools[0].key != pools[1].key
    with pytest.raises(ConfigError) as e:  # not a collection: one line naming the pool's key
        load_config({**base, "cluster": {"pools": [
            {"name": "p", "hardware": "b200", "role": "prefill", "parallelism": par},
            {"name": "d", "hardware": "b200", "role": "decode", "parallelism": par, "moe_table": "deepgemm"}]}})
    assert "cluster.pools[1].moe_table" in str(e.value) and "\n" not in str(e.value)


def test_the_row_only_an_mtp_entry_names_replays_with_mtp_on_its_decode_pool():
    """GB200 fp4 1k/8k, one DEP4 prefill worker and 7 TEP8 decode workers: concurrency 7 is listed
    only by the MTP entry (ctx1_gen7_tep8_batch1_eplb0_mtp3), 5 only by the STP one: the first
    replays with speculative {method: mtp, 3 drafts} (the run's section, verified on the decode pool),
    the second without; both load as valid configs."""
    kw = dict(osl=8192, decode_num_workers=7.0, decode_tp_size=8.0, decode_moe_ep_size=8.0, decode_batch_size=1.0)
    mtp, stp = recipe_row(7, **kw), recipe_row(5, **kw)
    assert mtp["speculative"] == "mtp" and stp["speculative"] == ""
    assert silicon.disagg_mtp_drafts(mtp) == 3 and silicon.disagg_mtp_drafts(stp) is None
    cm = silicon.row_config(mtp, "roofline", silicon.CLIENTS["bench-serving"])
    assert cm["speculative"] == {"method": "mtp", "num_speculative_tokens": 3}
    assert "speculative" not in silicon.row_config(stp, "roofline", silicon.CLIENTS["bench-serving"])
    c = load_config(cm)
    assert c.speculative.enabled and c.speculative.rates() == [0.85] * 3  # DeepSeek-V3's report, as aggregated rows
    assert silicon.disagg_limits(mtp) == ({}, {"max_num_seqs": 1})
    assert silicon.disagg_mtp_drafts({**mtp, "backend": "sglang"}) is None


def test_the_generators_limits_for_each_backend():
    """aiconfigurator's generator rules: prefill max_batch_size = the row's prefill batch size;
    the decode batch 512 below 512 (else twice it) on TRT-LLM and vLLM, the row's own on SGLang;
    token budgets isl + 1500 (TRT-LLM: rounded up to 32-token blocks)."""
    from sim.compare.disagg_launch import generated_limits

    assert generated_limits("trtllm", 1, 80, 15000) == (
        {"max_num_seqs": 1, "max_num_batched_tokens": 16512}, {"max_num_seqs": 512, "max_num_batched_tokens": 512})
    assert generated_limits("trtllm", 2, 600, 1000) == (
        {"max_num_seqs": 2, "max_num_batched_tokens": 2528}, {"max_num_seqs": 1200, "max_num_batched_tokens": 1216})
    assert generated_limits("sglang", 1, 48, 4000) == (
        {"max_num_seqs": 1, "max_num_batched_tokens": 5500}, {"max_num_seqs": 48, "max_num_batched_tokens": 5500})
    assert generated_limits("vllm", 1, 24, 4000) == (
        {"max_num_seqs": 1, "max_num_batched_tokens": 5500}, {"max_num_seqs": 512, "max_num_batched_tokens": 512})
    with pytest.raises(ValueError, match="unknown backend"):
        generated_limits("mystery", 1, 1, 1)


def test_a_gap_analysis_row_becomes_pools_with_its_prefill_and_decode_batch():
    """A gap-analysis row (SGLang, Qwen3-32B on H100): its prefill_batch_size (1) is each prefill
    worker's limit and its decode_batch_size (48) each decode worker's, as the generator launched them."""
    gap = drow(id="gap", silicon_data_source="source_file=/x/aic-auto-gap-analysis/data/h100_sxm/sglang/q.csv; "
                                             "silicon_concurrency=528",
               backend="sglang", model_path="Qwen/Qwen3-32B", system="h100_sxm", precision="bf16", isl=4000,
               osl=1000, prefill_num_workers=5.0, prefill_attention_dp_size=1.0, prefill_moe_ep_size=float("nan"),
               prefill_moe_tp_size=float("nan"), decode_num_workers=11.0, decode_tp_size=1.0,
               decode_moe_ep_size=float("nan"), decode_moe_tp_size=float("nan"), decode_batch_size=48.0)
    rows, _ = silicon.select(pd.DataFrame([gap]), mode="disagg")
    pools = silicon.disagg_pools(rows.iloc[0].to_dict())
    assert [p["scheduler"] for p in pools] == [{"max_num_seqs": 1, "max_num_batched_tokens": 5500},
                                               {"max_num_seqs": 48, "max_num_batched_tokens": 5500}]
    c = load_config(silicon.row_config(rows.iloc[0].to_dict(), "roofline", silicon.CLIENTS["fixed"]))
    from sim.cluster.pools import fleet

    assert [(p.knobs.max_num_seqs, p.knobs.max_num_batched_tokens) for p in fleet(c)] == [(1, 5500), (48, 5500)]


def test_the_first_token_streams_from_the_decode_worker(tmp_path):
    """One request, prefilled on one H100 and decoded on another: the client's first token comes
    at the end of its first decode step (prefill + KV transfer + that step), TPOT over the rest."""
    path = tmp_path / "t.csv"
    prompt, output = 600, 4
    path.write_text(f"arrival_s,prompt_tokens,output_tokens\n0,{prompt},{output}\n")
    pools = [{"name": "p", "hardware": "h100-sxm", "role": "prefill"},
             {"name": "d", "hardware": "h100-sxm", "role": "decode"}]
    cfg = load_config(tiny_config(cluster={"pools": pools}, workload={"trace": {"path": str(path)}},
                                  output={"step_records": False}))
    req, source = silicon.disagg_run(cfg)
    m, hw = get_model("llama-3.1-8b"), get_hardware("h100-sxm")
    cm = RooflineCostModel(m, hw, tp=1)
    prefill = cm.step_time(BatchShape((prompt,), (0,), tp=1)).total
    transfer = prompt * m.kv_bytes_per_token() / hw.host_bw
    steps = [cm.step_time(BatchShape((1,), (prompt + i,), tp=1)).total for i in range(output - 1)]
    r = req.iloc[0]
    assert source == "roofline"
    assert r.ttft_s == pytest.approx(prefill + transfer + steps[0], rel=1e-9)
    assert r.tpot_s == pytest.approx(sum(steps[1:]) / (output - 1), rel=1e-9)


@needs_db
def test_validate_silicon_disagg_end_to_end(tmp_path, capsys):
    rc = main(["validate-silicon", "--modes", "disagg", "--models", "qwen3-32b", "--systems", "gb200",
               "--cost-model", "roofline", "--limit", "1", "--rounds", "1", "--quiet", "--no-plots",
               "--out", str(tmp_path)])
    assert rc == 0
    pred = pd.read_parquet(tmp_path / "predictions.parquet")
    assert len(pred) == 1 and set(pred["mode"]) == {"disagg"}
    assert (pred["roofline_ttft_ms"] > 0).all() and (pred["roofline_tpot_ms"] > 0).all()
    assert (pred["p_workers"].iloc[0], pred["d_workers"].iloc[0], pred["d_tp"].iloc[0]) == (40, 6, 4)
    s = json.loads((tmp_path / "summary.json").read_text())
    d = s["disagg"]
    ape = abs(pred["roofline_tpot_ms"] - pred["silicon_tpot_ms"]) / pred["silicon_tpot_ms"]
    assert d["scores"]["roofline"]["overall"]["tpot_ape_median"] == pytest.approx(ape.iloc[0])
    assert d["rows_used_by_a_fit"] == 0 and d["rows_scored"] == 1
    assert "scores_held_out" not in s  # no aggregated rows asked for
    out = capsys.readouterr().out
    assert "disaggregated rows: 1 replayed" in out and "trtllm  gb200" in out


def test_validate_silicon_bad_mode_is_one_line(capsys, tmp_path):
    assert main(["validate-silicon", "--modes", "agg,xpyd", "--quiet", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--modes: unknown mode 'xpyd'" in err[0]


@needs_db
def test_validate_silicon_max_tokens_skips_rows_over_the_budget(capsys, tmp_path):
    # the gb200 Qwen3-32B rows: 552 clients x 500 tokens x 1 round = 276,000 tokens each
    args = ["validate-silicon", "--modes", "disagg", "--models", "qwen3-32b", "--systems", "gb200", "--rounds", "1",
            "--cost-model", "roofline", "--quiet", "--no-plots", "--out", str(tmp_path)]
    assert main([*args, "--max-tokens", "275999"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "larger than this run's budget (--max-tokens 275999" in err[0] and ": 2" in err[0]


def test_the_gb300_card_holds_the_figures_its_sources_give():
    """aiconfigurator-core 0.12.0 systems/gb300.yaml (the Blackwell Ultra datasheet's figures):
    mem_bw 8 TB/s, 2.5 / 5 / 15 PFLOPS dense bf16 / fp8 / fp4, 1400 W, 284208 MiB reported by
    nvidia-smi; no price in the reference table."""
    hw = get_hardware("GB300")
    assert hw.id == "gb300" and hw.price is None
    assert (hw.mem_bw_tbps, hw.bf16_tflops, hw.fp8_tflops, hw.fp4_tflops, hw.tdp_w) == (8.0, 2500, 5000, 15000, 1400)
    assert hw.usable_memory_gib == pytest.approx(284208 / 1024, abs=0.01)
    assert hw.host_bw == 450e9  # NVLink-C2C, 900 GB/s both ways, as on GB200


@needs_db
def test_auto_prices_gb300_from_its_kernel_database_tables(tmp_path, monkeypatch):
    from sim import simulate

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))  # (the derived tables' cache)
    assert kd.SYSTEMS["gb300"] == "gb300"
    for fw in ("vllm", "sglang", "trtllm"):
        assert kd.framework_versions("gb300", fw), fw
    res = simulate(tiny_config(hardware="gb300", cost={"model": "auto", "framework": "trtllm"},
                               workload={"rate": 5.0, "num_requests": 5}))
    assert res.summary["sim"]["cost_model"] == "kerneldb"


def test_inferencemax_sglang_wide_ep_decode_pools_run_deepep_low_latency():
    """InferenceMAX's DeepSeek-R1 SGLang GB200 fp8 wide-EP decode workers (srt-slurm max-tpt recipes:
    ``moe-a2a-backend deepep``, ``deepep-mode low_latency``) get ``moe_dispatch: deepep_ll``; the prefill
    pool, a decode side whose experts are not split over all its GPUs, nvfp4, other systems, TRT-LLM and
    other provenances keep the default exchange."""
    from sim.compare import disagg_launch as dl

    wide = dict(backend="sglang", precision="fp8", decode_num_workers=1.0, decode_tp_size=1.0,
                decode_attention_dp_size=32.0, decode_moe_ep_size=32.0, prefill_attention_dp_size=8.0,
                prefill_moe_ep_size=8.0)

    def dispatch(**kw):
        return [p.get("moe_dispatch") for p in silicon.disagg_pools(recipe_row(1024, **(wide | kw)))]
    assert dispatch() == [None, "deepep_ll"]
    assert dispatch(decode_moe_ep_size=1.0, decode_moe_tp_size=32.0) == [None, None]  # moe TP
    assert dispatch(precision="fp4") == [None, None]
    assert dispatch(system="gb300") == [None, None]
    assert dispatch(backend="trtllm") == [None, None]
    gap = {**recipe_row(1024, **wide), "silicon_data_source": "/aic-auto-gap-analysis/run; silicon_concurrency=1024"}
    assert [p.get("moe_dispatch") for p in silicon.disagg_pools(gap)] == [None, None]
    assert dl.decode_moe_dispatch("deepseek-r1", "gb200", "fp8", (1, 32, 32)) == "deepep_ll"
    assert dl.decode_moe_dispatch("deepseek-r1", "gb200", "fp8", (1, 1, 8)) is None  # no attention DP
