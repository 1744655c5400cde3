"""The scheduler limits each worker of a disaggregated silicon row was launched with
(``validate-silicon --modes disagg``; docs/kernel_database.md, "Disaggregated rows"): what
``disagg_pools`` gives each pool as ``cluster.pools[i].scheduler``.

Two provenances, two sources:

- **aiconfigurator's gap-analysis rows** (``silicon_data_source`` under ``/aic-auto-gap-analysis/``)
  ran the workers aiconfigurator's generator writes for the row's ``prefill_batch_size`` and
  ``decode_batch_size`` (the ``(p)bs`` and ``(d)bs`` its estimator takes): ``generated_limits``.
- **InferenceMAX's rows** (the database dump) ran its multi-node recipes: each decode worker's
  ``max_batch_size`` is the ``batchN`` of the recipe the row's configuration and concurrency name
  (``DECODE_BATCH``). There the csv's ``prefill_batch_size`` (1 on every row) and
  ``decode_batch_size`` (the concurrency over the decode ranks) are the estimator's inputs, not
  launch settings: the recipes set the prefill worker's batch (``max_batch_size: 8`` with
  ``max_num_tokens: 8192`` in the 1k/1k one read in full), and decode batches below the
  concurrency per worker, so requests wait for a decode slot after their prefill.
"""
from __future__ import annotations

import math

GENERATOR_SOURCE = ("aiconfigurator generator rules (ai-dynamo/aiconfigurator "
                    "src/aiconfigurator/generator/rule_plugin/{trtllm,sglang,vllm}.rule, commits 17676b35, "
                    "1089dfa8, 11324a64)")
"""Where ``generated_limits`` is read from."""
TOKENS_PER_BLOCK = 32  # the TRT-LLM rule rounds max_num_tokens up to KV blocks of 32 tokens


def _blocks(n: int) -> int:
    return math.ceil(n / TOKENS_PER_BLOCK) * TOKENS_PER_BLOCK


def generated_limits(backend: str, prefill_bs: int, decode_bs: int, isl: int) -> tuple[dict, dict]:
    """(prefill, decode) scheduler limits aiconfigurator's generator (``GENERATOR_SOURCE``) writes
    for disaggregated workers of batch sizes ``prefill_bs`` and ``decode_bs`` serving prompts of
    ``isl`` tokens:

    - TRT-LLM: prefill ``max_batch_size`` = prefill_bs, ``max_num_tokens`` = isl + 1500 rounded up
      to blocks of 32; decode ``max_batch_size`` = 512 below a batch of 512 (else twice it),
      ``max_num_tokens`` = that rounded up to blocks of 32;
    - SGLang: prefill ``max_batch_size`` = prefill_bs, decode ``max_batch_size`` = decode_bs (its
      ``--max-running-requests``), ``max_prefill_tokens`` = isl + 1500 on both;
    - vLLM: prefill ``max_batch_size`` = prefill_bs, ``max_num_tokens`` = isl + 1500; decode
      ``max_batch_size`` as TRT-LLM's, ``max_num_tokens`` = that batch.
    As ``max_num_seqs`` / ``max_num_batched_tokens`` of each pool."""
    decode_big = 512 if decode_bs < 512 else 2 * decode_bs
    if backend == "trtllm":
        return ({"max_num_seqs": prefill_bs, "max_num_batched_tokens": _blocks(isl + 1500)},
                {"max_num_seqs": decode_big, "max_num_batched_tokens": _blocks(decode_big)})
    if backend == "sglang":
        return ({"max_num_seqs": prefill_bs, "max_num_batched_tokens": isl + 1500},
                {"max_num_seqs": decode_bs, "max_num_batched_tokens": isl + 1500})
    if backend == "vllm":
        return ({"max_num_seqs": prefill_bs, "max_num_batched_tokens": isl + 1500},
                {"max_num_seqs": decode_big, "max_num_batched_tokens": decode_big})
    raise ValueError(f"generated_limits: unknown backend {backend!r}")


RECIPES_SOURCE = ("InferenceMAX .github/configs/nvidia-master.yaml (SemiAnalysisAI/InferenceX, commit 0004cf5f): "
                  "the dynamo-trt entries' CONFIG_FILE recipe names (srt-slurm, branch sa-submission-q1-2026, "
                  "recipes/trtllm/<system>-<precision>/<isl><osl>/{stp,mtp}/ctx<P>_gen<D>_{tep,dep}<N>_batch<B>_...), "
                  "and NVIDIA/srt-slurm recipes/trtllm/gb300-fp8 (commit 3aea7261; "
                  "1k1k/stp/ctx1_gen4_tep8_batch4_eplb0_mtp0_24.yaml read in full: decode max_batch_size 4)")
"""Where ``DECODE_BATCH`` is read from."""

DECODE_BATCH: dict[tuple, dict[int, int]] = {
    # (system, csv precision, isl, osl, prefill workers, prefill GPUs per worker, decode workers,
    #  decode GPUs per worker) -> {concurrency: each decode worker's max_batch_size}
    # InferenceMAX's DeepSeek-R1 TRT-LLM recipes with attention-DP prefill workers and TEP decode
    # workers (no attention DP: where the batch can bind). Where an STP and an MTP recipe share a
    # layout and a concurrency with different batches, the STP one: the rows' configuration ids
    # also ran concurrencies only the STP entries list (noted at the entry).
    ("b200_sxm", "fp4", 1024, 1024, 1, 4, 5, 8): {**{c: 32 for c in (10, 15, 25, 45, 90, 180)}, 6: 1},
    ("b200_sxm", "fp4", 1024, 1024, 1, 4, 6, 8): {450: 64},
    ("b200_sxm", "fp4", 8192, 1024, 1, 4, 5, 8): {**{c: 8 for c in (10, 15, 25, 50, 100)}, 6: 1},
    ("b200_sxm", "fp4", 8192, 1024, 2, 4, 5, 8): {370: 64},
    ("b200_sxm", "fp8", 8192, 1024, 1, 8, 1, 8): {1: 1},
    ("b200_sxm", "fp8", 8192, 1024, 1, 8, 4, 8): {32: 32, 128: 32},
    ("b200_sxm", "fp8", 8192, 1024, 1, 8, 6, 8): {96: 16},
    ("gb200", "fp4", 1024, 1024, 1, 4, 4, 8): {**{c: 32 for c in (12, 24, 48, 96, 192)}, 5: 1},
    ("gb200", "fp4", 1024, 8192, 1, 4, 7, 8): {5: 1, 7: 1},  # 7: the MTP entry (batch 1 as the STP one's)
    ("gb200", "fp4", 1024, 8192, 1, 4, 15, 4): {60: 4, 135: 8},
    ("gb200", "fp4", 8192, 1024, 1, 4, 4, 8): {12: 16, 44: 16, 76: 16, 5: 1},  # 12: STP (MTP: batch 8)
    ("gb200", "fp8", 1024, 1024, 1, 8, 3, 8): {3: 1, 27: 8},
    ("gb200", "fp8", 1024, 8192, 1, 8, 4, 8): {4: 1, 36: 8},  # 4: STP (MTP: batch 2)
    ("gb200", "fp8", 8192, 1024, 1, 8, 3, 8): {6: 1, 18: 4, 63: 16},  # 6: STP (MTP: batch 2)
    ("gb300", "fp4", 1024, 1024, 1, 2, 4, 8): {**{c: 32 for c in (12, 48, 96, 192)}, 5: 1},
    ("gb300", "fp4", 1024, 8192, 1, 2, 7, 8): {7: 1, 245: 32},
    ("gb300", "fp4", 1024, 8192, 1, 2, 15, 4): {60: 4},
    ("gb300", "fp4", 8192, 1024, 1, 2, 5, 4): {5: 4, 15: 4, 30: 4},
    ("gb300", "fp4", 8192, 1024, 1, 2, 4, 8): {5: 1, 12: 2},  # 12: STP (MTP: batch 4)
    ("gb300", "fp4", 8192, 1024, 1, 2, 3, 8): {72: 16},
    ("gb300", "fp8", 1024, 1024, 1, 4, 4, 8): {4: 1, 24: 4, 84: 16},
    ("gb300", "fp8", 1024, 8192, 1, 4, 4, 8): {4: 1, 36: 8},
    ("gb300", "fp8", 8192, 1024, 1, 4, 4, 8): {4: 1, 24: 4, 36: 8},
    ("h100_sxm", "fp8", 1024, 1024, 1, 16, 3, 16): {6: 1, 9: 2, 30: 8, 60: 16},
    ("h100_sxm", "fp8", 8192, 1024, 1, 16, 3, 16): {6: 1, 9: 2, 30: 8},
    ("h100_sxm", "fp8", 8192, 1024, 1, 16, 2, 16): {154: 64},
}


def recipe_decode_batch(model: str, system: str, precision: str, isl: int, osl: int, prefill: tuple[int, int, int],
                        decode: tuple[int, int, int], concurrency: int) -> int | None:
    """Each decode worker's ``max_batch_size`` in the InferenceMAX recipe of a DeepSeek-R1 TRT-LLM
    row (``DECODE_BATCH``), None where no recipe read matches (other models: their recipes were
    not read). ``prefill`` and ``decode``: (workers, attention tp, attention-DP ranks) of each side
    as the csv records them; only attention-DP prefill workers and decode workers without
    attention DP are listed."""
    if model != "deepseek-r1" or prefill[2] <= 1 or decode[2] != 1:
        return None
    return DECODE_BATCH.get(_layout(system, precision, isl, osl, prefill, decode), {}).get(concurrency)


def _layout(system: str, precision: str, isl: int, osl: int, prefill: tuple[int, int, int],
            decode: tuple[int, int, int]) -> tuple:
    """The key of a recipe table (``DECODE_BATCH``, ``MTP_DECODE``): the row's system, precision,
    lengths, prefill workers and their GPUs, decode workers and their attention TP."""
    pw, ptp, pdp = prefill
    dw, dtp, _ = decode
    return (system, precision, isl, osl, pw, ptp * pdp, dw, dtp)


DECODE_MOE_SOURCE = ("NVIDIA/srt-slurm recipes/trtllm: b200-fp8/1k1k/stp/ctx1_gen3_tp8_batch1024_eplb0_mtp0_4_trtllm_serve.yaml "
                     "(commit d0b60a10) and gb300-fp8/1k1k/stp/ctx1_gen4_tep8_batch4_eplb0_mtp0_24.yaml (commit 3aea7261): "
                     "decode workers without attention DP run moe_config.backend TRTLLM, prefill workers DEEPGEMM; "
                     "aiconfigurator collector/trtllm/collect_moe.py times TRT-LLM's trtllm-gen nvfp4 experts "
                     "(min-latency mode) on SM100 only and fp8_block with DeepGEMM only")
"""Where ``decode_moe_table`` is read from."""
BLACKWELL = ("b200_sxm", "gb200", "gb300")
TRTLLM_GEN_ELSEWHERE = {"fp8": BLACKWELL, "fp4": ("gb300",)}
"""Where TRT-LLM's own kernel-database collection lacks the trtllm-gen experts its ``TRTLLM`` MoE backend
runs, by csv precision: fp8 (block-scaled; timed with DeepGEMM only) on every Blackwell system, nvfp4 on
GB300 (SM103: the collector's min-latency, trtllm-gen, mode runs on SM100 only; B200 and GB200 have
those rows)."""


def decode_moe_table(model: str, system: str, precision: str, decode_dp: int) -> str | None:
    """The ``moe_table`` of the decode pool of an InferenceMAX DeepSeek-R1 TRT-LLM disaggregated row
    (``DECODE_MOE_SOURCE``): its decode workers without attention DP run the ``TRTLLM`` MoE backend
    (trtllm-gen kernels), which vLLM 0.24's collection times through FlashInfer where TRT-LLM's does
    not (``TRTLLM_GEN_ELSEWHERE``): "vllm"; None: the framework's own table (attention-DP decode
    workers, whose recipes were not read for this, Hopper, other models)."""
    if model != "deepseek-r1" or decode_dp > 1:
        return None
    return "vllm" if system in TRTLLM_GEN_ELSEWHERE.get(precision, ()) else None


MTP_SOURCE = ("InferenceMAX .github/configs/nvidia-master.yaml (SemiAnalysisAI/InferenceX, commit 0004cf5f), "
              "dsr1-fp4-gb200-dynamo-trt, 1k/8k: the spec-decoding mtp entry recipes/trtllm/gb200-fp4/1k8k/mtp/"
              "ctx1_gen7_tep8_batch1_eplb0_mtp3.yaml lists concurrency 7, the STP entry of that layout 5")
"""Where ``MTP_DECODE`` is read from."""
MTP_DECODE: dict[tuple, dict[int, int]] = {
    # (system, csv precision, isl, osl, prefill workers, prefill GPUs per worker, decode workers,
    #  decode GPUs per worker) -> {concurrency: MTP draft tokens} of the rows only an MTP entry names
    ("gb200", "fp4", 1024, 8192, 1, 4, 7, 8): {7: 3},
}
"""InferenceMAX's DeepSeek-R1 TRT-LLM disaggregated rows measured with MTP: the layouts and concurrencies
only an MTP entry of the search space lists (``MTP_SOURCE``; where an STP and an MTP entry list the same
concurrency, the csv cannot tell, and the row replays without speculation)."""


def recipe_mtp_drafts(model: str, system: str, precision: str, isl: int, osl: int, prefill: tuple[int, int, int],
                      decode: tuple[int, int, int], concurrency: int) -> int | None:
    """MTP draft tokens of an InferenceMAX DeepSeek-R1 TRT-LLM disaggregated row only an MTP entry
    names (``MTP_DECODE``), else None; arguments as ``recipe_decode_batch``'s."""
    if model != "deepseek-r1" or decode[2] != 1:
        return None
    return MTP_DECODE.get(_layout(system, precision, isl, osl, prefill, decode), {}).get(concurrency)


SGLANG_DEEPEP_SOURCE = ("NVIDIA/srt-slurm recipes/gb200-fp8/1k1k/max-tpt.yaml, 1k1k/ultra-tpt.yaml (commit 07fbab13) "
                        "and 8k1k/max_tpt.yaml (commit eb889c08), the recipes InferenceMAX's dsr1-fp8-gb200-dynamo-sglang "
                        "entry names (.github/configs/nvidia-master.yaml): decode workers tp-size = dp-size = ep-size "
                        "(32, 8 and 24) with enable-dp-attention, moe-a2a-backend deepep, "
                        "deepep-mode low_latency (their prefill workers: deepep-mode normal), MC_FORCE_MNNVL=1")
"""Where ``decode_moe_dispatch`` is read from."""
SGLANG_DEEPEP_DECODE = {("gb200", "fp8")}
"""(system, csv precision) of InferenceMAX's DeepSeek-R1 SGLang disaggregated rows whose wide-EP decode
recipes were read (``SGLANG_DEEPEP_SOURCE``); the other systems' and the nvfp4 recipes were not."""


def decode_moe_dispatch(model: str, system: str, precision: str, decode: tuple[int, int, int]) -> str | None:
    """The ``moe_dispatch`` of the decode pool of an InferenceMAX DeepSeek-R1 SGLang disaggregated row:
    ``deepep_ll`` where its recipe runs DeepEP low-latency (``SGLANG_DEEPEP_DECODE``: attention-DP
    decode workers whose experts are split over all their GPUs, ep = tp x dp, as DeepEP requires),
    else None (the pool's default: the all-gather). ``decode``: (attention tp, ranks, moe ep) of a
    decode worker as the csv records them."""
    tp, dp, ep = decode
    if model != "deepseek-r1" or dp <= 1 or ep != tp * dp or (system, precision) not in SGLANG_DEEPEP_DECODE:
        return None
    return "deepep_ll"
