"""Bring your own profiles: convert published profiling tables into servesim profile CSVs.

    python -m kernels.convert --from vidur --in DIR --model llama-2-7b --hardware-id h100-sxm \\
        --dtype fp16 --out calibration/profiles

``--from vidur`` reads Vidur's (microsoft/vidur) compute profiles, the folder
``data/profiling/compute/<device>/<hf-org>/<model>/`` holding ``mlp.csv`` and/or
``attention.csv``. Their schema, as published in that repository:

- Shape columns: ``n_head``, ``n_kv_head`` (model totals), ``n_embd`` (hidden size),
  ``n_expanded_embd`` (MLP intermediate size), ``use_gated_mlp``, ``vocab_size``,
  ``num_tensor_parallel_workers`` (tp); ``mlp.csv`` adds ``num_tokens``; ``attention.csv`` adds
  ``n_q_head``, ``block_size``, ``batch_size``, ``prefill_chunk_size``, ``kv_cache_size``
  (context already cached), ``is_prefill``.
- Times ``time_stats.<op>.{min,max,mean,median,std}`` in milliseconds, per op: ``attn_pre_proj``
  (QKV), ``attn_post_proj`` (O), ``mlp_up_proj`` (gate+up when gated), ``mlp_down_proj``,
  ``mlp_act``, ``attn_rope``, ``input_layernorm``, ``emb``; ``attn_prefill`` / ``attn_decode``.

We take the median as ``time_us`` (x1000). Vidur stores no percentiles and no repeat count, so
``time_us_p10``, ``time_us_p90`` and ``repeats`` stay empty. Missing or zero times are dropped
(a kernel never takes zero time; a zero there marks a missing measurement), duplicate grid
points keep their first row. Vidur does not record the profile dtype, so ``--dtype`` is required.
Standard library only (plus ``sim.catalog`` for the card).
"""
from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import sys
from pathlib import Path

from kernels.args import ProfileError, resolve_model
from kernels.schema import FAMILIES, RowWriter

VIDUR_GEMMS = {"attn_pre_proj": "qkv", "attn_post_proj": "o", "mlp_up_proj": "gate_up", "mlp_down_proj": "down"}
VIDUR_ELEMENTWISE = {"input_layernorm": "rmsnorm", "mlp_act": "silu_mul", "attn_rope": "rotary", "emb": "embedding"}


def _median_us(row: dict, op: str) -> float | None:
    v = row.get(f"time_stats.{op}.median", "")
    try:
        t = float(v) * 1e3
    except ValueError:
        return None
    return t if t > 0 and t == t else None  # drops 0 and NaN


def _shard(row: dict, q_col: str) -> dict:
    tp = int(row["num_tensor_parallel_workers"])
    heads, kv, hidden = int(row[q_col]), int(row["n_kv_head"]), int(row["n_embd"])
    return {"tp": tp, "hidden": hidden, "head_dim": hidden // heads,
            "q_heads": heads // tp, "kv_heads": max(1, kv // tp)}


def _check_card(card, row: dict, q_col: str, path: Path, line: int) -> None:
    got = (int(row["n_embd"]), int(row[q_col]), int(row["n_kv_head"]))
    want = (card.hidden_size, card.num_attention_heads, card.num_kv_heads)
    if got != want:
        raise ProfileError(f"{path}:{line}: hidden/heads/kv_heads {got} do not match model {card.id} {want}")


def _is_true(v: str) -> bool:
    return str(v).strip().lower() in ("true", "1")


def vidur_mlp_rows(path: Path, card, dtype: str):
    """(family, row) pairs from a Vidur ``mlp.csv``."""
    with path.open(newline="") as f:
        for line, r in enumerate(csv.DictReader(f), start=2):
            _check_card(card, r, "n_head", path, line)
            s = _shard(r, "n_head")
            t, tp, h, d = int(r["num_tokens"]), s["tp"], s["hidden"], s["head_dim"]
            inter = int(r["n_expanded_embd"]) // tp
            gemm_nk = {"qkv": ((s["q_heads"] + 2 * s["kv_heads"]) * d, h), "o": (h, s["q_heads"] * d),
                       "gate_up": ((2 if _is_true(r.get("use_gated_mlp", "True")) else 1) * inter, h),
                       "down": (h, inter)}
            for vop, op in VIDUR_GEMMS.items():
                us = _median_us(r, vop)
                if us is not None:
                    n, k = gemm_nk[op]
                    yield "gemm", {"dtype": dtype, "tp": tp, "op": op, "tokens": t, "groups": 1, "m": t, "n": n,
                                   "k": k, "time_us": round(us, 3)}
            widths = {"rmsnorm": h, "silu_mul": inter, "rotary": (s["q_heads"] + s["kv_heads"]) * d, "embedding": h}
            for vop, op in VIDUR_ELEMENTWISE.items():
                us = _median_us(r, vop)
                if us is not None:
                    yield "elementwise", {"dtype": dtype, "tp": tp, "op": op, "tokens": t, "hidden": widths[op],
                                          "time_us": round(us, 3)}


def vidur_attention_rows(path: Path, card, dtype: str):
    """(family, row) pairs from a Vidur ``attention.csv``."""
    with path.open(newline="") as f:
        for line, r in enumerate(csv.DictReader(f), start=2):
            _check_card(card, r, "n_q_head", path, line)
            s = _shard(r, "n_q_head")
            heads = {"dtype": dtype, "tp": s["tp"], "q_heads": s["q_heads"], "kv_heads": s["kv_heads"],
                     "head_dim": s["head_dim"]}
            b, ctx = int(r["batch_size"]), int(r["kv_cache_size"])
            if _is_true(r["is_prefill"]):
                us = _median_us(r, "attn_prefill")
                if us is not None:
                    yield "attn_prefill", {**heads, "num_seqs": b, "chunk_tokens": int(r["prefill_chunk_size"]),
                                           "context_tokens": ctx, "time_us": round(us, 3)}
            else:
                us = _median_us(r, "attn_decode")
                if us is not None:
                    yield "attn_decode", {**heads, "block_size": int(r["block_size"]), "batch": b,
                                          "context_min": ctx, "context_mean": ctx, "context_max": ctx,
                                          "kv_tokens_total": b * ctx, "time_us": round(us, 3)}


def convert_vidur(src: str | Path, model: str, hardware_id: str, dtype: str,
                  out: str | Path = "calibration/profiles") -> tuple[Path, dict[str, int]]:
    """Convert ``src/mlp.csv`` and ``src/attention.csv`` (whichever exist); returns
    (profile folder, rows added per family). Appends to existing CSVs, skipping known points."""
    src = Path(src)
    card, _ = resolve_model(model)
    files = [p for p in (src / "mlp.csv", src / "attention.csv") if p.exists()]
    if not files:
        raise ProfileError(f"{src}: neither mlp.csv nor attention.csv found (a Vidur compute profile folder)")
    folder = Path(out) / hardware_id / card.id
    folder.mkdir(parents=True, exist_ok=True)
    writers: dict[str, RowWriter] = {}
    added: dict[str, int] = {}
    try:
        for path in files:
            gen = vidur_mlp_rows if path.name == "mlp.csv" else vidur_attention_rows
            for fam, row in gen(path, card, dtype):
                w = writers.get(fam) or writers.setdefault(fam, RowWriter(folder / f"{fam}.csv", fam))
                if w.key(row) in w.done:
                    continue
                w.write(row)
                added[fam] = added.get(fam, 0) + 1
    except KeyError as e:
        raise ProfileError(f"{path}: missing Vidur column {e.args[0]!r}") from None
    finally:
        for w in writers.values():
            w.close()
    meta = {
        "hardware_id": hardware_id, "model": card.id, "dtypes": [dtype], "source": "vidur",
        "source_files": [p.name for p in files], "device": "converted", "device_name": None,
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "skipped": [{"family": f, "reason": "not in Vidur's compute profiles"} for f in FAMILIES if f not in writers],
        "rows_added": added, "complete": True,
        "notes": ["converted from Vidur (microsoft/vidur) compute profiles; time_us = Vidur median (ms) x 1000",
                  "time_us_p10, time_us_p90, repeats are empty: Vidur stores min/max/mean/median/std only",
                  "Vidur's attention times exclude its attn_input_reshape / attn_output_reshape ops"],
    }
    (folder / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    return folder, added


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m kernels.convert", description=__doc__.splitlines()[0])
    p.add_argument("--from", dest="fmt", choices=["vidur"], required=True, help="source format")
    p.add_argument("--in", dest="src", required=True, help="folder with the source CSVs (Vidur: mlp.csv, attention.csv)")
    p.add_argument("--model", required=True, help="catalog model id or model-card YAML the profile belongs to")
    p.add_argument("--hardware-id", required=True, help="catalog hardware id the profile was measured on")
    p.add_argument("--dtype", required=True, choices=["bf16", "fp16", "fp32"], help="dtype the source was profiled in")
    p.add_argument("--out", default="calibration/profiles", help="profiles root")
    args = p.parse_args(argv)
    try:
        folder, added = convert_vidur(args.src, args.model, args.hardware_id, args.dtype, args.out)
    except ProfileError as e:
        print(f"kernels.convert: error: {e}", file=sys.stderr)
        return 2
    print(f"converted {sum(added.values())} rows ({', '.join(f'{k} {v}' for k, v in added.items())}) -> {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
