"""The benchmark-client and server model of ``validate-silicon`` (sim/compare/silicon.py) and the
``trtllm`` scheduler it maps TensorRT-LLM rows to: exact outcomes on tiny cases."""
from __future__ import annotations

import numpy as np
import pytest

from policy_kit import drain, make, req, step
from sim.compare import silicon
from sim.compare.silicon import CLIENTS, Client, blend, client_for, generated_engine, implied_waiting, lengths, server

IMAX = "source_file=2026-04-06.csv; model=Llama-3.1-70B; silicon_concurrency=8; measured=2025-10-29T00:00:00.000Z"
OTHER = "source_file=/data/h100_sxm/trtllm/1.0.0rc3/meta-llama_Llama-3.1-8B-Instruct.csv; silicon_concurrency=8"
GAP = ("source_file=/Users/someone/projects/aic-auto-gap-analysis/data/h100_sxm/trtllm/1.0.0rc3/"
       "meta-llama_Llama-3.1-8B-Instruct.csv; silicon_concurrency=8")


def row(**kw) -> dict:
    base = {"model": "llama-3.1-70b", "hardware": "h100-sxm", "system": "h200_sxm", "dtype": "fp8", "tp": 1,
            "backend": "trtllm", "isl": 1024, "osl": 1024, "concurrency": 4, "silicon_data_source": IMAX}
    return base | kw


# ---------------------------------------------------------------------- the trtllm scheduler

def test_trtllm_runs_whole_prompts_generation_first():
    s = make("trtllm", 40, max_num_batched_tokens=10)
    plans = drain(s, [req(0, 8, 3), req(1, 6, 2)])
    # the second prompt (6) does not fit the 2 tokens left: it waits for a step with room, whole
    assert [p.num_new_tokens for p in plans] == [{0: 8}, {0: 1, 1: 6}, {0: 1, 1: 1}]


def test_trtllm_chunked_prefill_knob_chunks_like_vllm_v1():
    s = make("trtllm", 40, max_num_batched_tokens=10, enable_chunked_prefill=True)
    plans = drain(s, [req(0, 8, 3), req(1, 6, 2)])
    assert [p.num_new_tokens for p in plans] == [{0: 8, 1: 2}, {0: 1, 1: 4}, {0: 1, 1: 1}]


def test_trtllm_batch_waiting_holds_prompts_for_the_timeout_then_sends_them_together():
    s = make("trtllm", 60, max_num_batched_tokens=100, batch_wait_timeout_iters=2, batch_wait_max_tokens_ratio=0.9)
    s.add(req(0, 4, 10))
    assert step(s).num_new_tokens == {0: 4}  # nothing generating: no wait
    s.add(req(1, 5, 2)), s.add(req(2, 5, 2))
    assert step(s).num_new_tokens == {0: 1} and s.held_steps == 1
    assert step(s).num_new_tokens == {0: 1} and s.held_steps == 2
    assert step(s).num_new_tokens == {0: 1, 1: 5, 2: 5} and s.held_steps == 0


def test_trtllm_batch_waiting_releases_once_the_token_ratio_is_reached():
    s = make("trtllm", 60, max_num_batched_tokens=20, batch_wait_timeout_iters=50, batch_wait_max_tokens_ratio=0.5)
    s.add(req(0, 4, 10))
    step(s)
    s.add(req(1, 5, 2))
    assert step(s).num_new_tokens == {0: 1}  # 1 + 5 tokens < 0.5 x 20
    s.add(req(2, 5, 2))
    assert step(s).num_new_tokens == {0: 1, 1: 5, 2: 5}  # 1 + 10 >= 10


@pytest.mark.parametrize("name, knob", [("trtllm", "overlap_scheduler"), ("vllm_v1", "async_scheduling")])
def test_overlapped_scheduling_takes_an_arrival_one_step_later(name, knob):
    # steps start at t = 0, 1, 2, ...; request 1 arrives at t = 0.5, while step 0 runs
    for overlap, joins in ((False, 1), (True, 2)):
        s = make(name, 60, max_num_batched_tokens=100, **{knob: overlap})
        s.add(req(0, 4, 10))
        assert step(s, 0.0).num_new_tokens == {0: 4}
        s.add(req(1, 5, 2, arrival=0.5))
        plans = [step(s, float(t)) for t in (1, 2)]
        # step 1's batch was formed (overlap) while step 0 ran, before the arrival: it joins step 2
        assert [p.num_new_tokens.get(1) == 5 for p in plans] == [joins == 1, joins == 2]
    idle = make(name, 60, max_num_batched_tokens=100, **{knob: True})
    idle.add(req(0, 4, 2, arrival=0.5))
    assert step(idle, 1.0).num_new_tokens == {0: 4}  # nothing running: taken at once


# ---------------------------------------------------------------------- clients and servers

def test_rows_get_the_client_their_provenance_names():
    assert client_for(row()).name == "bench-serving"
    assert client_for(row(silicon_data_source=OTHER)).name == "fixed"
    assert client_for(row(), "steady").name == "steady"
    from sim.commands.validate_silicon import CLIENT_NAMES

    assert tuple(CLIENTS) == CLIENT_NAMES  # the command lists them without importing the replay
    bs = CLIENTS["bench-serving"]
    assert (bs.per_client, bs.warmup_per_client, bs.range_ratio, bs.drain) == (10, 0, 0.8, True)


def test_lengths_follow_benchmark_serving_random_range_ratio():
    # benchmark_serving.py: np.random.randint(int(L * ratio), L + 1): inclusive integers
    assert lengths(1024, 0.8) == {"kind": "uniform", "min": 819, "max": 1024}
    assert lengths(8192, 1.0) == {"kind": "fixed", "value": 8192}


def test_server_settings_follow_the_inferencemax_launch_scripts():
    bs, fixed = CLIENTS["bench-serving"], CLIENTS["fixed"]
    assert server(row(tp=4), bs) == {"scheduler": {"name": "trtllm", "max_num_batched_tokens": 16384, "max_tokens_oracle": True,
                                                   "overlap_scheduler": True,
                                                   "batch_wait_timeout_iters": 20, "batch_wait_max_tokens_ratio": 0.9},
                                     "kv": {"dtype": "fp8"}}
    assert "batch_wait_timeout_iters" not in server(row(tp=8), bs)["scheduler"]
    assert "batch_wait_timeout_iters" not in server(row(tp=4, osl=8192), bs)["scheduler"]
    assert server(row(dtype="bf16", silicon_data_source=OTHER), fixed) == {
        "scheduler": {"name": "trtllm", "max_num_batched_tokens": 8192, "max_tokens_oracle": True,
                      "overlap_scheduler": True}, "kv": {}}
    assert server(row(backend="vllm"), bs) == {"scheduler": {"name": "vllm_v1", "max_num_batched_tokens": 8192,
                                                             "async_scheduling": True}, "kv": {"dtype": "fp8"}}
    assert server(row(backend="vllm", system="h100_sxm"), bs) == {
        "scheduler": {"name": "vllm_v1", "max_num_batched_tokens": 8192}, "kv": {}}
    assert "async_scheduling" not in server(row(backend="vllm", silicon_data_source=OTHER), fixed)["scheduler"]
    assert server(row(backend="sglang"), fixed) == {"scheduler": {"name": "vllm_v1", "max_num_batched_tokens": 8192,
                                                                   "async_scheduling": True}, "kv": {}}


IMAX_DSR1 = ("source_file=2026-03-25.csv; model=DeepSeek-R1; silicon_concurrency=16; measured=2026-02-06T17:21:58Z; "
             "wip=False; image=nvcr.io#nvidia/tensorrt-llm/release:1.2.0rc6.post3")
DUMP = "db-dump/2026-04-27; config_id=733; silicon_concurrency=128; workflow_run_id=758; vllm/vllm-openai:v0.19.0-cu130"


def test_each_inferencemax_row_gets_its_own_models_launch_script():
    bs = CLIENTS["bench-serving"]
    assert client_for(row(silicon_data_source=IMAX_DSR1)).name == "bench-serving"
    assert client_for(row(silicon_data_source=DUMP)).name == "bench-serving"
    # DeepSeek-R1 on TRT-LLM, 8k prompts, 16 clients: the dsr1 script's max_num_tokens covers the
    # longest prompt (8192 x 1.85 = 15155) and the batch: (16 + 15155 + 127) // 64 x 64 = 15296
    dsr1 = row(model="deepseek-r1", dtype="nvfp4", tp=4, isl=8192, osl=1024, concurrency=16,
               silicon_data_source=IMAX_DSR1)
    assert server(dsr1, bs) == {"scheduler": {"name": "trtllm", "max_num_batched_tokens": 15296, "max_tokens_oracle": True,
                                              "overlap_scheduler": True, "max_num_seqs": 16}, "kv": {"dtype": "fp8"}}
    # gpt-oss from the Llama rows' own file: none of the 70B script's settings (no 16384, no batch waiting)
    oss = row(model="gpt-oss-120b", dtype="mxfp4", tp=4)
    assert server(oss, bs) == {"scheduler": {"name": "trtllm", "max_num_batched_tokens": 20000, "max_tokens_oracle": True,
                                             "overlap_scheduler": True, "max_num_seqs": 512}, "kv": {}}
    assert server(oss | {"backend": "vllm"}, bs) == {"scheduler": {"name": "vllm_v1", "max_num_batched_tokens": 8192,
                                                                  "async_scheduling": True}, "kv": {}}
    # a model whose scripts the replay does not reproduce: the framework's defaults
    assert server(row(model="qwen3-32b", backend="vllm"), bs) == {
        "scheduler": {"name": "vllm_v1", "max_num_batched_tokens": 8192}, "kv": {}}


def _csv_rows(**over) -> "pd.DataFrame":
    import pandas as pd

    base = {"id": "a", "silicon_data_source": IMAX_DSR1, "backend": "trtllm", "backend_version": "1.2.0rc6",
            "model_path": "deepseek-ai/DeepSeek-R1", "system": "b200_sxm", "precision": "fp4", "mode": "agg",
            "isl": 8192, "osl": 1024, "batch_size": 16, "tp_size": 4, "pp_size": 1, "attention_dp_size": 1,
            "moe_tp_size": 4, "moe_ep_size": 1, "silicon_ttft_ms": 435.761103, "silicon_tpot_ms": 11.50713}
    return pd.DataFrame([base | o for o in over.get("rows", [{}])])


def test_a_measurement_listed_twice_is_replayed_once():
    df = _csv_rows(rows=[{}, {"id": "b", "silicon_data_source": IMAX.replace("Llama-3.1-70B", "DeepSeek-R1")},
                         {"id": "c", "silicon_ttft_ms": 389.79}])  # c: another measurement of the same config
    rows, skipped = silicon.select(df)
    assert list(rows["id"]) == ["a", "c"]
    assert sum(v for k, v in skipped.items() if k.startswith("duplicate")) == 1


def test_unknown_models_are_counted_as_skipped_not_an_error():
    df = _csv_rows(rows=[{"model_path": "someone/Unknown-9B"}, {"model_path": "someone/Other-1B", "id": "z"}, {"id": "d"}])
    rows, skipped = silicon.select(df, limit=2)
    assert list(rows["id"]) == ["d"]
    assert skipped["model not in the catalog (someone/Unknown-9B)"] == 1
    assert skipped["model not in the catalog (someone/Other-1B)"] == 1
    only_unknown, skipped = silicon.select(df.iloc[:2])  # a column of no catalog id at all
    assert not len(only_unknown) and sum(skipped.values()) == 2


def test_gap_analysis_rows_get_the_engine_limits_aiconfigurator_generates():
    fixed = CLIENTS["fixed"]
    # TRT-LLM: max_batch_size = batch size, max_num_tokens = batch + isl + 1500 in blocks of 32
    assert generated_engine("trtllm", 8, 1024) == {"max_num_batched_tokens": 2560, "max_num_seqs": 8}
    assert generated_engine("trtllm", 128, 4096) == {"max_num_batched_tokens": 5728, "max_num_seqs": 128}
    # SGLang: --max-running-requests = batch size, --max-prefill-tokens = isl + 1500 (mixed chunk)
    assert generated_engine("sglang", 512, 1000) == {"max_num_batched_tokens": 2500, "max_num_seqs": 512}
    assert generated_engine("vllm", 64, 8000) == {}  # max-num-seqs 512 and the default budget
    gap = row(dtype="bf16", silicon_data_source=GAP, concurrency=8)
    assert server(gap, fixed) == {"scheduler": {"name": "trtllm", "max_num_batched_tokens": 2560, "max_tokens_oracle": True,
                                                "overlap_scheduler": True, "max_num_seqs": 8}, "kv": {}}
    cfg = silicon.row_config(gap | {"model": "llama-3.1-8b", "hardware": "h100-sxm"}, "roofline", fixed)
    assert cfg["scheduler"]["max_num_seqs"] == 8  # the generated limit, not the replay's 256
    assert silicon.row_config(row(), "roofline", fixed)["scheduler"]["max_num_seqs"] == 256


def test_implied_waiting_recovers_the_queue_from_ttft_and_e2e():
    # 16 clients, one always waiting: TTFT = 40 ms + E2E / 16 (Little's law)
    e2e = np.array([1000.0, 2000.0, 4000.0])
    intercept, waiting = implied_waiting(40 + e2e / 16, e2e, 16)
    assert intercept == pytest.approx(40) and waiting == pytest.approx(1)
    assert implied_waiting(np.full(3, 90.0), e2e, 16) == pytest.approx((90, 0))  # no queue: flat
    with pytest.raises(ValueError):
        implied_waiting([50.0, 60.0], [1000.0, 1000.0], 8)


def test_blend_weights_the_replayed_waves_as_the_benchmark_counts_them():
    c, rounds = 2, 4  # replayed waves: burst [1, 3], middle [10, 10, 20, 20], drain [5, 7]
    ids = np.arange(8)
    vals = np.array([1, 3, 10, 10, 20, 20, 5, 7], dtype=float)
    # 10 waves in the benchmark: the burst, 8 steady waves at the middle mean (15), the drain
    assert blend(vals, ids, c, rounds, CLIENTS["bench-serving"]) == pytest.approx((4 + 15 * 16 + 12) / 20)
    # a 2-wave warm-up drops the burst and one steady wave
    warm = Client("w", 10, 2, 1.0, "")
    assert blend(vals, ids, c, rounds, warm) == pytest.approx((15 * 14 + 12) / 16)
    # steady: the middle only
    assert blend(vals, ids, c, rounds, CLIENTS["steady"]) == pytest.approx(15.0)
    # fewer than 3 replayed waves: the plain mean
    assert blend(vals[:4], ids[:4], c, 2, CLIENTS["bench-serving"]) == pytest.approx(6.0)


def test_replay_of_a_closed_loop_row_reports_the_blended_means():
    r = row(model="llama-3.1-8b", hardware="h100-sxm", system="h100_sxm", backend="vllm", dtype="bf16", tp=1,
            isl=256, osl=16, concurrency=2)
    out = silicon.replay((r, "roofline", 3, (), "none", "bench-serving", 0.0))
    assert out["client"] == "bench-serving" and out["ttft_ms"] > 0 and out["tpot_ms"] > 0
    late = silicon.replay((r, "roofline", 3, (), "none", "bench-serving", 0.005))
    assert late["ttft_ms"] > out["ttft_ms"]  # the front-end latency is part of the TTFT


def test_trtllm_guaranteed_no_evict_holds_the_whole_sequence_from_admission():
    # 4-token blocks; each request needs 8 + 8 = 16 tokens = 4 blocks for its whole sequence
    s = make("trtllm", 6, max_num_batched_tokens=100, max_seq_len=64)
    a, b = req(0, 8, 8, max_out=8), req(1, 8, 8, max_out=8)
    s.add(a), s.add(b)
    assert step(s).num_new_tokens == {0: 8}  # b would need 4 more blocks: only 2 are free
    assert s.kv.held[0] == 4
    plans = drain(s, [])
    assert all(not p.preempted for p in plans) and plans[7].num_new_tokens == {1: 8}
    s = make("trtllm", 6, max_num_batched_tokens=100, max_tokens_oracle=True)  # reserves 8 + 4 = 3 blocks each
    s.add(req(0, 8, 4, max_out=100)), s.add(req(1, 8, 4, max_out=100))
    assert step(s).num_new_tokens == {0: 8, 1: 8} and list(s.kv.held.values()) == [3, 3]
    s = make("trtllm", 6, max_num_batched_tokens=100, capacity_scheduler_policy="MAX_UTILIZATION")
    s.add(req(0, 8, 8, max_out=8)), s.add(req(1, 8, 8, max_out=8))
    assert step(s).num_new_tokens == {0: 8, 1: 8}  # blocks as tokens come: both fit at first


def test_expert_parallel_and_attention_dp_rows_replay_their_placement():
    # 03-25 encoding: attention_dp_size = the GPUs, moe_ep_size = EP, batch_size = one rank's share
    df = _csv_rows(rows=[{"id": "ep", "moe_tp_size": 1, "moe_ep_size": 4},
                         {"id": "adp", "tp_size": 1, "attention_dp_size": 4, "moe_tp_size": 1, "moe_ep_size": 4,
                          "batch_size": 4, "silicon_ttft_ms": 1.0}])
    rows, skipped = silicon.select(df)
    assert list(rows["id"]) == ["ep", "adp"] and not skipped
    assert [tuple(int(x) for x in t) for t in rows[["tp", "ep", "dp", "concurrency"]].to_numpy()] == [(4, 4, 1, 16),
                                                                                                      (1, 4, 4, 16)]
    assert silicon.row_config(rows.iloc[0].to_dict(), "roofline")["parallelism"] == {"tp": 4, "ep": 4}
    assert silicon.row_config(rows.iloc[1].to_dict(), "roofline")["parallelism"] == {"tp": 1, "ep": 4, "dp": 4}


def test_attention_dp_placements_of_each_encoding():
    # TRT-LLM: trtllm-serve --tp_size=TP --ep_size=EP with attention DP: TP ranks of attention TP 1
    r0325 = {"id": "2026_03_25_deepseek_r1_b200_sxm_trtllm_fp4_agg_1024x1024_c64_tp8_0_ep8_0_976", "backend": "trtllm",
             "tp_size": 1, "attention_dp_size": 8, "moe_tp_size": 1, "moe_ep_size": 8}
    r0406 = {"id": "2026_04_06_deepseek_r1_b200_sxm_trtllm_fp4_agg_1024x1024_c64_tp8_ep8_937", "backend": "trtllm",
             "tp_size": 1, "attention_dp_size": 64, "moe_tp_size": 8, "moe_ep_size": 8}
    dump = {"id": "dsr1_b200_trtllm_fp4_agg_1024x8192_c256_cfg192", "backend": "trtllm", "tp_size": 1,
            "attention_dp_size": 16, "moe_tp_size": 4, "moe_ep_size": 4}
    tp4ep1 = {"id": "x_cfg1", "backend": "trtllm", "tp_size": 1, "attention_dp_size": 4, "moe_tp_size": 4, "moe_ep_size": 1}
    # vLLM: --tensor-parallel-size=1 --data-parallel-size=TP --enable-expert-parallel (the dump's
    # moe_ep_size is TP x EP of its config)
    vllm = {"id": "minimaxm2_5_b300_vllm_fp8_agg_1024x1024_c512_cfg734", "backend": "vllm", "tp_size": 4,
            "attention_dp_size": 4, "moe_tp_size": 1, "moe_ep_size": 16}
    assert [silicon.placement(r) for r in (r0325, r0406, dump, tp4ep1, vllm)] == [
        (1, 8, 8), (1, 8, 8), (1, 4, 4), (1, 1, 4), (1, 4, 4)]
    # the clients are silicon_concurrency (batch_size is a rank's share, or clients / (TP x EP))
    src = "source_file=2026-04-06.csv; model=DeepSeek-R1; silicon_concurrency=64; measured=2026-02-06"
    assert silicon.concurrency(r0406 | {"batch_size": 1, "silicon_data_source": src}) == 64
    assert silicon.concurrency(r0325 | {"batch_size": 8, "silicon_data_source": ""}) == 64


def test_one_measurement_in_two_encodings_is_replayed_once():
    src = IMAX_DSR1.replace("silicon_concurrency=16", "silicon_concurrency=64")
    df = _csv_rows(rows=[{"id": "2026_03_25_deepseek_r1_b200_sxm_trtllm_fp4_agg_8192x1024_c64_tp8_0_ep8_0_1", "tp_size": 1,
                          "attention_dp_size": 8, "moe_tp_size": 1, "moe_ep_size": 8, "batch_size": 8,
                          "silicon_data_source": src},
                         {"id": "2026_04_06_deepseek_r1_b200_sxm_trtllm_fp4_agg_8192x1024_c64_tp8_ep8_2", "tp_size": 1,
                          "attention_dp_size": 64, "moe_tp_size": 8, "moe_ep_size": 8, "batch_size": 1,
                          "silicon_data_source": src.replace("2026-03-25", "2026-04-06")}])
    rows, skipped = silicon.select(df)
    assert len(rows) == 1 and sum(v for k, v in skipped.items() if k.startswith("duplicate")) == 1


def test_mtp_runs_are_read_from_the_launch_configuration():
    def r(system="b200_sxm", precision="fp4", isl=1024, osl=1024, c=64, tp=1, ep=8, dp=8, version="1.2.0rc6.post3", **kw):
        return {"backend": "trtllm", "silicon_data_source": IMAX_DSR1, "model": "deepseek-r1", "id": "a", "system": system,
                "precision": precision, "isl": isl, "osl": osl, "concurrency": c, "tp": tp, "ep": ep, "dp": dp,
                "backend_version": version} | kw
    # tp8 ep8 attention DP at 64 clients, B200 release rc6.post3: the -mtp entry's search space and release
    assert silicon.mtp_run(r()) == "mtp"
    # 128 clients: only the entry without speculation has it, which runs rc6.post2
    assert silicon.mtp_run(r(c=128)) == "unknown"
    assert silicon.mtp_run(r(c=128, version="1.2.0rc6.post2")) == "none"
    # tp4 ep4 attention DP at 256 clients: in both; the release tells
    assert silicon.mtp_run(r(c=256, ep=4, dp=4)) == "mtp"
    assert silicon.mtp_run(r(c=256, ep=4, dp=4, version="1.2.0rc6.post2")) == "none"
    # an older release, or none recorded: the configuration of its day was not read
    assert silicon.mtp_run(r(version="1.1.0rc2.post2")) == "unknown"
    assert silicon.mtp_run(r(version="nan")) == "unknown"
    # H200: both entries run one release, so a point in both cannot tell; one in the -mtp entry's only can
    assert silicon.mtp_run(r(system="h200_sxm", precision="fp8", c=32, tp=8, ep=8, dp=1,
                             version="1.1.0rc2.post2")) == "unknown"
    assert silicon.mtp_run(r(system="h200_sxm", precision="fp8", c=128, tp=1, ep=8, dp=8,
                             version="1.1.0rc2.post2")) == "mtp"
    # other models, frameworks and provenance: not read
    assert silicon.mtp_run(r(model="gpt-oss-120b")) == ""
    assert silicon.mtp_run(r(backend="sglang")) == ""
    assert silicon.mtp_run(r(silicon_data_source="/x/aic-auto-gap-analysis/y")) == ""
    # the dump's dsr1 runs labelled DeepSeek-V3 are InferenceMAX's DeepSeek-R1 runs
    assert silicon.mtp_run(r(model="deepseek-v3", id="dsr1_b200_trtllm_fp4_agg_1024x1024_c64_cfg1")) == "mtp"
    # an MTP row replays with MTP: 3 drafts, 1 with attention DP; the script's token budget
    mtp_row = row(model="deepseek-r1", hardware="b200", dtype="nvfp4", tp=1, ep=8, dp=8, concurrency=64,
                  speculative="mtp", silicon_data_source=IMAX_DSR1)
    cfg = silicon.row_config(mtp_row, "roofline", CLIENTS["bench-serving"])
    assert cfg["speculative"] == {"method": "mtp", "num_speculative_tokens": 1}
    # max_batch_size 64 / 8 = 8; max_num_tokens ((1 + 1) x 8 + 1024 + 127) // 64 x 64
    assert cfg["scheduler"]["max_num_batched_tokens"] == (2 * 8 + 1024 + 127) // 64 * 64
    assert cfg["scheduler"]["max_num_seqs"] == 8
    tp_row = mtp_row | {"tp": 8, "ep": 1, "dp": 1}
    assert silicon.row_config(tp_row, "roofline", CLIENTS["bench-serving"])["speculative"]["num_speculative_tokens"] == 3
    assert "speculative" not in silicon.row_config(mtp_row | {"speculative": "unknown"}, "roofline")


def test_rows_whose_batch_size_is_not_their_client_count_are_skipped():
    df = _csv_rows(rows=[{"id": "ok"}, {"id": "split", "batch_size": 8}])  # the provenance says 16 clients
    rows, skipped = silicon.select(df)
    assert list(rows["id"]) == ["ok"]
    assert skipped["batch size differs from the recorded concurrency (silicon_concurrency)"] == 1


def test_inferencemax_tp_times_ep_rows_replay_their_real_placement():
    # "tp8_ep8" recorded as tp_size 64 = 8 x 8 (moe_tp_size 8, moe_ep_size 8): one 8-GPU node
    named = {"id": "2026_04_06_deepseek_r1_b200_sxm_sglang_fp4_agg_1024x8192_c4_tp8_ep8_1027", "tp_size": 64,
             "moe_tp_size": 8, "moe_ep_size": 8}
    dump = {"id": "dsr1_b200_sglang_fp4_agg_1024x8192_c4_cfg201", "tp_size": 16, "moe_tp_size": 4, "moe_ep_size": 4}
    true_ep = {"id": "x_tp8_epnone_1", "tp_size": 8, "moe_tp_size": 1, "moe_ep_size": 8}
    assert [silicon.placement(r) for r in (named, dump, true_ep)] == [(8, 8, 1), (4, 4, 1), (8, 8, 1)]
    assert silicon.placement({"tp_size": 4, "moe_tp_size": 4, "moe_ep_size": 1}) == (4, 1, 1)
    rows, _ = silicon.select(_csv_rows(rows=[named]))
    assert (int(rows["tp"][0]), int(rows["ep"][0])) == (8, 8)


def test_dsr1_fp8_b200_trtllm_rows_price_experts_from_the_kernel_their_moe_backend_runs():
    bs = CLIENTS["bench-serving"]
    r = row(model="deepseek-r1", system="b200_sxm", dtype="fp8", tp=8, concurrency=64, silicon_data_source=IMAX_DSR1)
    assert server(r, bs)["cost"] == {"moe_table": "vllm"}  # moe_config.backend TRTLLM: trtllm-gen
    assert "cost" not in server(r | {"concurrency": 256}, bs)  # 1k prompts at 256 clients: DEEPGEMM
    assert server(r | {"concurrency": 256, "isl": 8192}, bs)["cost"] == {"moe_table": "vllm"}
    assert "cost" not in server(r | {"speculative": "mtp"}, bs)  # the -mtp script: DEEPGEMM
    assert "cost" not in server(r | {"system": "h200_sxm"}, bs)  # Hopper: the TRT-LLM table
    assert "cost" not in server(r | {"dtype": "nvfp4"}, bs)
    cfg = silicon.row_config(r | {"hardware": "b200"}, "kerneldb", bs)
    assert cfg["cost"] == {"model": "kerneldb", "framework": "trtllm", "moe_table": "vllm"}


def test_tokens_streamed_k_at_a_time_reach_the_client_with_the_kth():
    ttft, tpot, n = np.array([0.1, 0.2, 0.3]), np.array([0.01, 0.02, np.nan]), np.array([101, 5, 1])
    first, gap = silicon.streamed(ttft, tpot, n, 30)
    # the 30th token of 101: 29 gaps later; of 5 tokens, the 5th (the end); one token: its own time
    assert first == pytest.approx([0.1 + 29 * 0.01, 0.2 + 4 * 0.02, 0.3])
    # E2E unchanged: (0.1 + 100 x 0.01 - 0.39) / 100; the 5-token request's last chunk is its only one
    assert gap[0] == pytest.approx((1.1 - 0.39) / 100) and gap[1] == pytest.approx(0.0) and np.isnan(gap[2])
    same = silicon.streamed(ttft, tpot, n, 1)
    assert same[0] == pytest.approx(ttft) and same[1][:2] == pytest.approx(tpot[:2])


def test_stream_interval_of_the_sglang_deepseek_scripts():
    bs = CLIENTS["bench-serving"]
    r = row(model="deepseek-r1", backend="sglang", system="b200_sxm", precision="fp8", silicon_data_source=IMAX_DSR1)
    assert silicon.stream_interval(r, bs) == 30
    assert silicon.stream_interval(r | {"precision": "fp4"}, bs) == 10
    assert silicon.stream_interval(r | {"system": "h200_sxm"}, bs) == 10
    assert silicon.stream_interval(r | {"system": "b300_sxm"}, bs) == 1  # its script was not read
    assert silicon.stream_interval(r | {"backend": "trtllm"}, bs) == 1
    assert silicon.stream_interval(r | {"model": "glm-5"}, bs) == 1
    assert silicon.stream_interval(r, CLIENTS["fixed"]) == 1  # not an InferenceMAX run
