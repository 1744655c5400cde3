"""``servesim catalog``: the model and hardware cards."""
from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser("catalog", help="list model and hardware cards")
    p.add_argument("kind", nargs="?", choices=["models", "hardware"], help="only this kind")
    p.add_argument("--json", action="store_true", help="print the cards as JSON (every field, derived counts added)")
    p.set_defaults(func=run)


def as_json(kind: str | None) -> dict:
    """The cards as plain data: every field of each card, plus a model's derived parameter and
    KV-cache figures."""
    from dataclasses import asdict

    from sim.catalog import list_hardware, list_models

    out = {}
    if kind in (None, "models"):
        out["models"] = [{**asdict(m), "total_params": m.total_params, "active_params": m.active_params,
                          "kv_bytes_per_token_bf16": m.kv_bytes_per_token()} for m in list_models()]
    if kind in (None, "hardware"):
        out["hardware"] = [asdict(h) for h in list_hardware()]
    return out


def run(args) -> int:
    from sim.catalog import list_hardware, list_models

    if args.json:
        import json

        print(json.dumps(as_json(args.kind), indent=2))
        return 0
    if args.kind in (None, "models"):
        print(f"{'model':<17}{'params':>9}{'layers':>8}{'hidden':>8}{'heads':>7}{'kv':>5}{'context':>9}  {'KV/token bf16':>14}  notes")
        for m in list_models():
            notes = []
            if m.is_moe:
                shared = f" + {m.num_shared_experts} shared" if m.num_shared_experts else ""
                notes.append(f"MoE {m.num_experts}x top-{m.experts_top_k}{shared}, {m.active_params_b or m.active_params / 1e9:.1f}B active")
            if m.is_mla:
                notes.append(f"MLA (latent {m.kv_lora_rank}+{m.qk_rope_head_dim})")
            if m.window_layers:
                notes.append(f"sliding window {m.sliding_window} on {m.window_layers} layers")
            kv = "MLA" if m.is_mla else f"{m.num_kv_heads}"
            print(f"{m.id:<17}{m.params_b:>8.2f}B{m.num_layers:>8}{m.hidden_size:>8}{m.num_attention_heads:>7}"
                  f"{kv:>5}{m.max_context:>9}  {m.kv_bytes_per_token() / 1024:>11.0f} KiB  {'; '.join(notes)}")
        print()
    if args.kind in (None, "hardware"):
        print(f"{'hardware':<11}{'memory':>9}{'usable':>11}{'HBM TB/s':>10}{'bf16 TF':>9}{'fp8 TF':>8}{'fp4 TF':>8}"
              f"{'link GB/s':>11}{'TDP W':>7}  {'dtypes':<24}$/GPU-h (source)")
        for h in list_hardware():
            price = f"{h.price.usd_per_gpu_hour:.3f} ({h.price.provider}, {h.price.date})" if h.price else "none listed: set cost.usd_per_gpu_hour"
            fp8 = f"{h.fp8_tflops:g}" if h.fp8_tflops else "-"
            link = f"{h.interconnect_gbps_bidir:g}" if h.interconnect_gbps_bidir else "PCIe"
            fp4 = f"{h.fp4_tflops:g}" if h.fp4_tflops else "-"
            usable = f"{h.usable_memory_gib:g} GiB" if h.usable_memory_gib else "-"
            print(f"{h.id:<11}{h.memory_gib:>6g} GiB{usable:>11}{h.mem_bw_tbps:>10g}{h.bf16_tflops:>9g}{fp8:>8}{fp4:>8}"
                  f"{link:>11}{h.tdp_w:>7g}  {','.join(h.dtypes):<24}{price}")
    return 0
