"""Time a real engine on static batches: Hugging Face transformers ``generate`` on a Llama-layout
model with random weights built from a model card in code (nothing is downloaded), writing the
table ``servesim calibrate-engine --static`` reads (docs/calibration.md).

    python -m calibration.static_batch --model calibration/cards/llama-tiny.yaml \\
        --shapes 1:32,1:128,2:64,4:32,4:128,8:64 --output-tokens 9 --out times.csv

This is an engine servesim did not write (transformers' own Llama modules, its KV cache and its
generate loop), timed as a user would time theirs, as the tokens stream out: per shape,
``generate`` of ``--output-tokens`` tokens with a streamer that reads the clock whenever a step's
tokens arrive; the first-token time runs from the call to the first tokens (the prefill step),
the per-token time from the first tokens to the last over the later tokens. Greedy decoding with a fixed token count (min =
max new tokens), no padding (every prompt of a batch has the same length). On the CPU torch runs
on ``--threads`` threads (default 1) and the clock is the process time (load on a shared machine
does not inflate it; ``kernels.timing.cpu_clock``); on a GPU (``--device cuda``) the wall clock
at each token's arrival on the host. Each time is the fastest of ``--repeats``.
Needs torch and transformers (the ``test`` extra).
"""
from __future__ import annotations

import argparse
import csv
import os
import sys
import time
from pathlib import Path


def parse_shapes(spec: str) -> list[tuple[int, int]]:
    """``B:P,B:P`` -> [(batch, prompt tokens)]."""
    out = []
    for part in spec.split(","):
        if not part.strip():
            continue
        try:
            b, p = (int(x) for x in part.split(":"))
        except ValueError:
            raise ValueError(f"--shapes: {part!r} is not batch:prompt_tokens") from None
        if b < 1 or p < 1:
            raise ValueError(f"--shapes: {part!r}: batch and prompt tokens must be positive")
        out.append((b, p))
    return out


def build_model(card, dtype: str = "fp32", seed: int = 0, device: str = "cpu"):
    """A transformers ``LlamaForCausalLM`` of the card's architecture with random weights, built
    on ``device`` in ``dtype``."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing from the hub: the config is built here
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=card.vocab_size, hidden_size=card.hidden_size,
                      intermediate_size=card.intermediate_size, num_hidden_layers=card.num_layers,
                      num_attention_heads=card.num_attention_heads, num_key_value_heads=card.num_kv_heads,
                      head_dim=card.head_dim, max_position_embeddings=card.max_context,
                      tie_word_embeddings=card.tie_word_embeddings)
    torch.manual_seed(seed)
    dt = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    default = torch.get_default_dtype()
    torch.set_default_dtype(dt)  # built in its dtype: an 8B model is not first made in fp32
    try:
        with torch.device(device):
            model = LlamaForCausalLM(cfg)
    finally:
        torch.set_default_dtype(default)
    return model.eval()


class StepClock:
    """A transformers streamer that only reads ``clock`` each time ``generate`` hands it tokens:
    once with the prompt, then after every step (each step's tokens, the whole batch)."""

    def __init__(self, clock):
        self.clock, self.times = clock, []

    def put(self, value) -> None:
        self.times.append(self.clock())

    def end(self) -> None:
        pass


def time_shapes(model, shapes: list[tuple[int, int]], output_tokens: int, repeats: int = 3,
                clock=time.process_time, seed: int = 0) -> list[dict]:
    """One row per (batch, prompt tokens), from ``repeats`` generate calls of ``output_tokens``
    tokens: the first-token time (call to the first step's tokens) and the per-token time (first
    step's tokens to the last's, over the later tokens), each the fastest of the repeats. On a
    GPU the tokens reach the streamer after a copy to the host, which waits for the device, so
    the wall clock read then is the device's progress (the device is synchronised before each
    call)."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    vocab = model.config.vocab_size
    dev = next(model.parameters()).device
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    rows = []
    for b, p in shapes:
        ids = torch.randint(0, vocab, (b, p), generator=gen).to(dev)
        mask = torch.ones_like(ids)
        firsts, per = [], []
        for k in range(repeats + 1):  # the first call is a warm-up (allocation)
            sc = StepClock(clock)
            with torch.inference_mode():
                sync()
                t0 = clock()
                out = model.generate(ids, attention_mask=mask, max_new_tokens=output_tokens,
                                     min_new_tokens=output_tokens, do_sample=False, pad_token_id=0, streamer=sc)
            if out.shape != (b, p + output_tokens) or len(sc.times) != output_tokens + 1:
                raise RuntimeError(f"generate returned {tuple(out.shape)} after {len(sc.times)} streamer calls")
            if k:
                firsts.append(sc.times[1] - t0)
                per.append((sc.times[-1] - sc.times[1]) / (output_tokens - 1))
        rows.append({"batch": b, "prompt_tokens": p, "output_tokens": output_tokens, "first_token_s": min(firsts),
                     "per_token_s": min(per)})
    return rows


def write_csv(rows: list[dict], path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        for r in rows:
            w.writerow({k: (f"{v:.9g}" if isinstance(v, float) else v) for k, v in r.items()})
    return path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m calibration.static_batch", description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, help="model card (catalog id or YAML path) of a Llama-layout model")
    p.add_argument("--shapes", required=True, help="batch:prompt_tokens,... shapes to time")
    p.add_argument("--output-tokens", type=int, default=9, help="tokens generated per sequence (>= 2)")
    p.add_argument("--dtype", default="fp32", choices=["fp32", "bf16", "fp16"])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=1, help="torch threads on the CPU")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--out", required=True, help="CSV to write")
    a = p.parse_args(argv)
    import torch

    from kernels.args import ProfileError, resolve_model
    from kernels.timing import cpu_clock

    try:
        card, _ = resolve_model(a.model)
        shapes = parse_shapes(a.shapes)
    except (ProfileError, ValueError) as e:
        print(f"calibration.static_batch: error: {e}", file=sys.stderr)
        return 2
    if a.output_tokens < 2:
        print("calibration.static_batch: error: --output-tokens must be at least 2", file=sys.stderr)
        return 2
    if a.device == "cuda" and not torch.cuda.is_available():
        print("calibration.static_batch: error: --device cuda but torch sees no CUDA GPU", file=sys.stderr)
        return 2
    torch.set_num_threads(a.threads)
    model = build_model(card, a.dtype, device=a.device)
    clock = time.perf_counter if a.device == "cuda" else cpu_clock(a.threads)[1]
    from kernels.load import host_load, load_warning

    load0 = host_load()
    rows = time_shapes(model, shapes, a.output_tokens, a.repeats, clock)
    print(f"wrote {write_csv(rows, a.out)} ({len(rows)} shapes)")
    clock_name = "perf_counter" if a.device == "cuda" else cpu_clock(a.threads)[0]
    w = load_warning(load0, "engine timings", clock_name) or load_warning(host_load(), "engine timings", clock_name)
    if w and a.device == "cpu":
        print(f"calibration.static_batch: warning: {w}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
