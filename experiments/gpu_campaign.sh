#!/usr/bin/env bash
# GPU profiling campaign: every operator profile servesim needs for Llama-3.1-8B (tp 1) and the
# Llama-3.1-70B and Qwen2.5-72B shards at tp 1,2,4,8, on ONE H200 (hardware id h200-sxm).
#
#   bash experiments/gpu_campaign.sh                 # on the GPU machine
#   DEVICE=cpu bash experiments/gpu_campaign.sh      # CPU smoke run: llama-tiny, small grid
#
# Env: DEVICE (cuda|cpu), PROFILE_ROOT (default calibration/profiles), OUT (if set, the profiles
# are also copied to $OUT/calibration/profiles after each model and on exit: the device machine
# copies back only $OUT). Resumable: a rerun skips grid points already in the CSVs.
#
# Budget (python -m kernels.profile ... --estimate, roofline at 60% peak / 70% HBM + overheads):
#   llama-3.1-8b tp1 ~10 s, llama-3.1-70b tp1-8 ~40 s, qwen2.5-72b tp1-8 ~40 s of profiling,
#   plus ~15 s start-up per model: ~2.5 min against an 8 min limit. Collectives are not measured
#   on one GPU (recorded as skipped in meta.json); the simulator prices them analytically.
set -euo pipefail
cd "$(dirname "$0")/.."

DEVICE="${DEVICE:-cuda}"
PROFILE_ROOT="${PROFILE_ROOT:-calibration/profiles}"
PY="${PYTHON:-python}"
if [ "$DEVICE" = "cpu" ]; then
  HW=cpu; GRID=small
  RUNS=("calibration/cards/llama-tiny.yaml:1")
else
  HW=h200-sxm; GRID=full
  RUNS=("llama-3.1-8b:1" "llama-3.1-70b:1,2,4,8" "qwen2.5-72b:1,2,4,8")
fi

sync_out() {
  if [ -n "${OUT:-}" ] && [ -d "$PROFILE_ROOT/$HW" ]; then
    mkdir -p "$OUT/calibration/profiles"
    cp -r "$PROFILE_ROOT/$HW" "$OUT/calibration/profiles/"
  fi
}
trap sync_out EXIT

echo "campaign: device=$DEVICE hardware=$HW grid=$GRID root=$PROFILE_ROOT"
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
    --dtype bf16 --grid "$GRID" --out "$PROFILE_ROOT" --no-progress
  echo "campaign: $model tp $tps took $((SECONDS - t)) s (total $((SECONDS - T0)) s)"
  sync_out
done

# ---- VALIDATION HOOK (owned by calibration/): runs only once calibration/validate.py exists ----
if "$PY" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('calibration.validate') is None)"; then
  for run in "${RUNS[@]}"; do
    model="${run%%:*}"
    "$PY" -m calibration.validate --device "$DEVICE" --hardware-id "$HW" --model "$model" \
      --profiles "$PROFILE_ROOT" || echo "campaign: validation of $model failed (profiles kept)"
  done
else
  echo "campaign: calibration.validate not present; validation skipped"
fi
# ---- end of validation hook ----
sync_out
echo "campaign: done in $((SECONDS - T0)) s"
