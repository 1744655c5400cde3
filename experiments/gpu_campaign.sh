#!/usr/bin/env bash
# GPU profiling campaign: every operator profile servesim needs for Llama-3.1-8B (tp 1) and the
# Llama-3.1-70B and Qwen2.5-72B shards at tp 1,2,4,8, on ONE H200 (hardware id h200-sxm); then the
# calibration workflow of docs/calibration.md on the same device: fit, validate (held-out kernels
# and the real replay), and, when transformers is installed, the engine check: time transformers
# `generate` on static batches of a random-weight Llama-3.1-8B (bf16), fit its host overhead on
# half of the shapes with `calibrate-engine` and print the error on the others.
#
#   bash experiments/gpu_campaign.sh                 # on the GPU machine (CUDA events)
#   DEVICE=cpu bash experiments/gpu_campaign.sh      # CPU dry run: llama-tiny, small grid, fp32
#
# Env: DEVICE (cuda|cpu), PROFILE_ROOT (default calibration/profiles), OUT (if set, the profiles
# are also copied to $OUT/calibration/profiles after each model and on exit, and everything under
# $OUT/calibration is packed into $OUT/campaign.tar.gz at the end: the device machine copies back
# only a few files of $OUT, at most two folders down). Resumable: a rerun skips grid points
# already in the CSVs.
#
# Budget (python -m kernels.profile ... --estimate, roofline at 60% peak / 70% HBM + overheads):
#   llama-3.1-8b tp1 ~10 s, llama-3.1-70b tp1-8 ~40 s, qwen2.5-72b tp1-8 ~40 s of profiling,
#   plus ~15 s start-up per model: ~2.5 min against an 8 min limit; the engine check adds about a
#   minute (building the random 8B model, 12 shapes x 4 generate calls of 33 tokens). Collectives are not measured
#   on one GPU (recorded as skipped in meta.json); the simulator prices them analytically.
set -euo pipefail
cd "$(dirname "$0")/.."

DEVICE="${DEVICE:-cuda}"
PROFILE_ROOT="${PROFILE_ROOT:-calibration/profiles}"
PY="${PYTHON:-python}"
if [ "$DEVICE" = "cpu" ]; then
  HW=cpu; GRID=small; DTYPE=fp32
  RUNS=("calibration/cards/llama-tiny.yaml:1")
  ENGINE_MODEL=calibration/cards/llama-tiny.yaml; ENGINE_ID=llama-tiny
  ENGINE_SHAPES="1:32,1:128,2:64,2:256,4:32,4:128,8:64,8:256"; ENGINE_TOKENS=9
else
  HW=h200-sxm; GRID=full; DTYPE=bf16
  RUNS=("llama-3.1-8b:1" "llama-3.1-70b:1,2,4,8" "qwen2.5-72b:1,2,4,8")
  ENGINE_MODEL=llama-3.1-8b; ENGINE_ID=llama-3.1-8b
  ENGINE_SHAPES="1:128,1:1024,2:256,2:2048,4:128,4:1024,8:256,8:2048,16:128,16:1024,32:256,64:128"; ENGINE_TOKENS=33
fi

sync_out() {
  if [ -n "${OUT:-}" ] && [ -d "$PROFILE_ROOT/$HW" ]; then
    mkdir -p "$OUT/calibration/profiles"
    cp -r "$PROFILE_ROOT/$HW" "$OUT/calibration/profiles/"
  fi
}
trap sync_out EXIT

echo "campaign: device=$DEVICE hardware=$HW grid=$GRID dtype=$DTYPE root=$PROFILE_ROOT"
"$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'gpus', torch.cuda.device_count())"
T0=$SECONDS
for run in "${RUNS[@]}"; do
  model="${run%%:*}"; tps="${run##*:}"
  if [ "$DEVICE" != "cpu" ]; then  # print the point counts and the time budget first
    "$PY" -m kernels.profile --device "$DEVICE" --hardware-id "$HW" --model "$model" --tp "$tps" \
      --grid "$GRID" --out "$PROFILE_ROOT" --estimate
  fi
  t=$SECONDS
  "$PY" -m kernels.profile --device "$DEVICE" --hardware-id "$HW" --model "$model" --tp "$tps" \
    --dtype "$DTYPE" --grid "$GRID" --out "$PROFILE_ROOT" --no-progress
  echo "campaign: $model tp $tps took $((SECONDS - t)) s (total $((SECONDS - T0)) s)"
  sync_out
done

# ---- VALIDATION HOOK (owned by calibration/): runs only once calibration/validate.py exists ----
if "$PY" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('calibration.validate') is None)"; then
  for run in "${RUNS[@]}"; do
    model="${run%%:*}"
    "$PY" -m calibration.validate --device "$DEVICE" --hardware-id "$HW" --model "$model" --dtype "$DTYPE" \
      --profiles "$PROFILE_ROOT" || echo "campaign: validation of $model failed (profiles kept)"
  done
else
  echo "campaign: calibration.validate not present; validation skipped"
fi
# ---- end of validation hook ----

# ---- ENGINE CHECK: a real engine servesim did not write, calibrated and predicted ----
# transformers attends over a contiguous KV cache with SDPA, not the paged layout profiled above
# (vLLM's): the engine model's profile is copied without attn_decode.csv, its decode attention
# profiled again with --attention contiguous, and that copy fitted for the check.
CPROF="${OUT:-.}/calibration/profiles_contiguous"
FITTED="${OUT:-.}/calibration/fitted_contiguous/$HW/$ENGINE_ID"
if ! "$PY" -c "import transformers" 2>/dev/null; then
  echo "campaign: transformers not installed; engine check skipped"
elif [ ! -f "$PROFILE_ROOT/$HW/$ENGINE_ID/gemm.csv" ]; then
  echo "campaign: no profile in $PROFILE_ROOT/$HW/$ENGINE_ID; engine check skipped"
else
  mkdir -p "$CPROF/$HW/$ENGINE_ID" "${OUT:-.}/calibration/engine"
  for f in "$PROFILE_ROOT/$HW/$ENGINE_ID"/*; do
    case "$(basename "$f")" in attn_decode.csv) ;; *) cp "$f" "$CPROF/$HW/$ENGINE_ID/" ;; esac
  done
  "$PY" -m kernels.profile --device "$DEVICE" --hardware-id "$HW" --model "$ENGINE_MODEL" --tp 1 --dtype "$DTYPE" \
    --grid "$GRID" --out "$CPROF" --ops attn_decode --attention contiguous --no-progress \
  && "$PY" -m calibration.fit "$CPROF/$HW/$ENGINE_ID" --out "${OUT:-.}/calibration/fitted_contiguous" \
  && HF_HUB_OFFLINE=1 "$PY" -m calibration.static_batch --device "$DEVICE" --dtype "$DTYPE" --model "$ENGINE_MODEL" \
    --shapes "$ENGINE_SHAPES" --output-tokens "$ENGINE_TOKENS" --repeats 3 \
    --out "${OUT:-.}/calibration/engine/transformers_static.csv" \
  && "$PY" -m calibration.engine --fitted "$FITTED" --static "${OUT:-.}/calibration/engine/transformers_static.csv" \
    --dtype "$DTYPE" --sampling greedy --out "${OUT:-.}/calibration/engine/fitted" \
    --note "transformers generate, random-weight $ENGINE_ID, $DTYPE, $DEVICE" \
  || echo "campaign: engine check failed"
fi
# ---- end of engine check ----
sync_out
if [ -n "${OUT:-}" ] && [ -d "$OUT/calibration" ]; then  # one file: the device machine returns few, shallow files
  tar czf "$OUT/campaign.tar.gz" -C "$OUT" calibration && echo "campaign: everything packed in \$OUT/campaign.tar.gz"
fi
echo "campaign: done in $((SECONDS - T0)) s"
