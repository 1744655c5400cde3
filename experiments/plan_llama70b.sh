#!/usr/bin/env bash
# The 4 GPU x 4 TP x 3 scheduler fleet search of docs/planning.md (about 2 minutes on 2 cores).
set -euo pipefail
OUT=${1:-results/plan_llama70b}
servesim plan --model llama-3.1-70b --rate 8 --gpus h100-sxm,a100-80gb,h200-sxm,b200 --tp 1,2,4,8 \
  --schedulers vllm,vllm_v1,sarathi --slo-ttft-p99 2 --slo-tpot-p99 0.1 --out "$OUT" --workers 2
servesim run "$OUT/config.yaml" --out "$OUT/chosen_run"
servesim report "$OUT" --out "$OUT/report"
