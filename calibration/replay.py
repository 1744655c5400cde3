"""The real replay: execute simulated step plans as PyTorch forward passes (docs/architecture.md section 7).

A Llama-architecture model with random weights (RMSNorm, rotary embeddings, grouped-query
attention, SwiGLU MLP, LM head, temperature sampling) built from a model card, over a real paged
KV cache (per layer ``[num_blocks, block_size, kv_heads, head_dim]``; each request owns a shuffled
list of blocks; K/V are written through a slot mapping and gathered through block tables). Each
step of a plan is one forward pass over all its scheduled tokens, in the same operator
decomposition the cost model prices (``sim.cost.ops``): the QKV / O / gate-up / down GEMMs over
all tokens; prefill chunks through ``scaled_dot_product_attention`` one sequence at a time;
decode sequences through one padded paged-attention gather, as ``kernels.ops.attn_decode``.

A step's time is measured in two parts: host-side preparation (token ids, positions, slot
mapping, block tables, built on the CPU and copied to the device) and the forward pass
(synchronised on CUDA). Needs torch and numpy only (runs on the bare GPU machine).
"""
from __future__ import annotations

import math
import random
import statistics
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from sim.kv.blocks import DEFAULT_BLOCK_SIZE  # stdlib only: fine on the bare GPU image

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def _causal_mask(chunk: int, total: int, device):
    try:
        from torch.nn.attention.bias import causal_lower_right

        return causal_lower_right(chunk, total)
    except ImportError:
        q = torch.arange(chunk, device=device).unsqueeze(1) + (total - chunk)
        return q >= torch.arange(total, device=device).unsqueeze(0)


@dataclass
class StepInputs:
    ids: torch.Tensor
    positions: torch.Tensor
    slots: torch.Tensor
    prefill: list  # (start, n, gather slots [c+n], mask or None)
    dec_idx: torch.Tensor | None
    dec_table: torch.Tensor | None
    dec_pad: torch.Tensor | None
    dec_len: int
    last_idx: torch.Tensor


class ReplayModel:
    """Random-weight Llama shard (tp = 1) with a paged KV cache on ``device``."""

    def __init__(self, card, device: str | torch.device, dtype: str = "bf16", block_size: int = DEFAULT_BLOCK_SIZE,
                 num_blocks: int = 1024, max_positions: int = 8192, seed: int = 0):
        self.card, self.dev = card, torch.device(device)
        self.dt = DTYPES[dtype]
        self.bs = block_size
        h, d = card.hidden_size, card.head_dim
        self.qh, self.kvh, self.d, self.h = card.num_attention_heads, card.num_kv_heads, d, h
        self.inter = card.intermediate_size
        g = torch.Generator(device="cpu").manual_seed(seed)
        torch.manual_seed(seed)

        def w(*shape):
            t = torch.empty(*shape, dtype=self.dt, device=self.dev)
            return t.normal_(0.0, 0.02)

        self.embed = w(card.vocab_size, h)
        self.lm_head = w(card.vocab_size, h)
        self.final_norm = torch.ones(h, dtype=self.dt, device=self.dev)
        self.layers = []
        for _ in range(card.num_layers):
            self.layers.append({
                "wqkv": w((self.qh + 2 * self.kvh) * d, h), "wo": w(h, self.qh * d),
                "wgu": w(2 * self.inter, h), "wd": w(h, self.inter),
                "n1": torch.ones(h, dtype=self.dt, device=self.dev), "n2": torch.ones(h, dtype=self.dt, device=self.dev),
                "kc": torch.zeros(num_blocks, block_size, self.kvh, d, dtype=self.dt, device=self.dev),
                "vc": torch.zeros(num_blocks, block_size, self.kvh, d, dtype=self.dt, device=self.dev),
            })
        inv = 1.0 / (10000.0 ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
        ang = torch.arange(max_positions, dtype=torch.float32).unsqueeze(1) * inv
        self.cos = torch.cat([ang.cos(), ang.cos()], -1).to(self.dt).to(self.dev)
        self.sin = torch.cat([ang.sin(), ang.sin()], -1).to(self.dt).to(self.dev)
        self.num_blocks = num_blocks
        self._free = list(range(1, num_blocks))  # block 0: padding target of decode tables
        random.Random(seed).shuffle(self._free)
        self.tables: dict[str, list[int]] = {}
        self._rng = g

    # ------------------------------------------------------------------ blocks
    def blocks_for(self, rid: str, tokens: int) -> list[int]:
        t = self.tables.setdefault(rid, [])
        need = -(-tokens // self.bs) - len(t)
        if need > len(self._free):
            raise RuntimeError(f"replay KV cache of {self.num_blocks} blocks is full")
        for _ in range(max(0, need)):
            t.append(self._free.pop())
        return t

    def release(self, rid: str) -> None:
        self._free.extend(self.tables.pop(rid, []))

    # ------------------------------------------------------------------ host side
    def prepare(self, ids: list, new: list[int], ctx: list[int]) -> StepInputs:
        """Host-side input preparation of one step (what an engine's model runner does)."""
        bs, dev = self.bs, self.dev
        tok, pos, slots, prefill = [], [], [], []
        dec_rows, dec_lens, dec_idx, last = [], [], [], []
        at = 0
        for rid, n, c in zip(ids, new, ctx):
            table = self.blocks_for(str(rid), c + n)
            p = list(range(c, c + n))
            pos += p
            slots += [table[x // bs] * bs + x % bs for x in p]
            tok += [(x * 7919 + 13 * len(tok)) % self.card.vocab_size for x in p]
            if n == 1:
                dec_idx.append(at)
                dec_rows.append(table)
                dec_lens.append(c + 1)
            else:
                gather = [table[x // bs] * bs + x % bs for x in range(c + n)]
                prefill.append((at, n, c, gather))
            at += n
            last.append(at - 1)
        pre = []
        for start, n, c, gather in prefill:
            mask = None if c == 0 else _causal_mask(n, c + n, dev)
            pre.append((start, n, torch.tensor(gather, device=dev), mask))
        dec_table = dec_pad = dec_i = None
        dec_len = 0
        if dec_rows:
            width = max(len(r) for r in dec_rows)
            dec_table = torch.tensor([r + [0] * (width - len(r)) for r in dec_rows], device=dev)
            dec_len = width * bs
            if any(x != dec_len for x in dec_lens):
                lens = torch.tensor(dec_lens, device=dev).unsqueeze(1)
                dec_pad = (torch.arange(dec_len, device=dev).unsqueeze(0) >= lens).view(len(dec_rows), 1, 1, dec_len)
            dec_i = torch.tensor(dec_idx, device=dev)
        return StepInputs(torch.tensor(tok, device=dev), torch.tensor(pos, device=dev), torch.tensor(slots, device=dev),
                          pre, dec_i, dec_table, dec_pad, dec_len, torch.tensor(last, device=dev))

    # ------------------------------------------------------------------ forward
    @torch.inference_mode()
    def forward(self, s: StepInputs) -> torch.Tensor:
        qh, kvh, d = self.qh, self.kvh, self.d
        T = s.ids.shape[0]
        x = F.embedding(s.ids, self.embed)
        cos, sin = self.cos[s.positions].unsqueeze(1), self.sin[s.positions].unsqueeze(1)
        scale = 1.0 / math.sqrt(d)
        g = qh // kvh
        for L in self.layers:
            hdn = F.rms_norm(x, (self.h,), L["n1"], 1e-5)
            qkv = F.linear(hdn, L["wqkv"])
            qk = qkv[:, : (qh + kvh) * d].view(T, qh + kvh, d)
            x1, x2 = qk[..., : d // 2], qk[..., d // 2:]
            qk = qk * cos + torch.cat((-x2, x1), dim=-1) * sin
            q, k = qk[:, :qh], qk[:, qh:]
            v = qkv[:, (qh + kvh) * d:].view(T, kvh, d)
            kflat, vflat = L["kc"].view(-1, kvh, d), L["vc"].view(-1, kvh, d)
            kflat[s.slots] = k
            vflat[s.slots] = v
            out = torch.empty(T, qh, d, dtype=x.dtype, device=x.device)
            for start, n, gather, mask in s.prefill:
                kk = kflat[gather].transpose(0, 1).unsqueeze(0)
                vv = vflat[gather].transpose(0, 1).unsqueeze(0)
                qq = q[start:start + n].transpose(0, 1).unsqueeze(0)
                if mask is None:
                    o = F.scaled_dot_product_attention(qq, kk, vv, is_causal=True, enable_gqa=qh != kvh)
                else:
                    o = F.scaled_dot_product_attention(qq, kk, vv, attn_mask=mask, enable_gqa=qh != kvh)
                out[start:start + n] = o[0].transpose(0, 1)
            if s.dec_table is not None:
                b, sl = s.dec_table.shape[0], s.dec_len
                kd = L["kc"][s.dec_table].view(b, sl, kvh, d).permute(0, 2, 3, 1)
                vd = L["vc"][s.dec_table].view(b, sl, kvh, d).transpose(1, 2)
                qd = q[s.dec_idx].view(b, kvh, g, d)
                sc = torch.matmul(qd, kd) * scale
                if s.dec_pad is not None:
                    sc = sc.masked_fill(s.dec_pad, float("-inf"))
                od = torch.matmul(torch.softmax(sc.float(), dim=-1).to(x.dtype), vd)
                out[s.dec_idx] = od.reshape(b, qh, d)
            x = x + F.linear(out.view(T, qh * d), L["wo"])
            hdn = F.rms_norm(x, (self.h,), L["n2"], 1e-5)
            gu = F.linear(hdn, L["wgu"])
            x = x + F.linear(F.silu(gu[:, : self.inter]) * gu[:, self.inter:], L["wd"])
        xl = F.rms_norm(x[s.last_idx], (self.h,), self.final_norm, 1e-5)
        logits = F.linear(xl, self.lm_head).float()
        return torch.multinomial(torch.softmax(logits / 0.8, dim=-1), 1)

    # ------------------------------------------------------------------ timing
    @property
    def clock(self):
        if self.dev.type == "cuda":
            return time.perf_counter
        from kernels.timing import cpu_clock

        return cpu_clock(torch.get_num_threads())[1]

    def _sync(self):
        if self.dev.type == "cuda":
            torch.cuda.synchronize(self.dev)

    def time_step(self, ids: list, new: list[int], ctx: list[int], repeats: int = 3) -> tuple[float, float]:
        """(host seconds, forward seconds) of the fastest of ``repeats`` runs of the same step (its
        KV writes are idempotent, so repeating a step leaves the cache as one run would). The
        minimum estimates the uncontended time on a shared CPU; on a GPU repeats barely differ.
        Timed by ``clock``: wall clock with CUDA synchronisation on a GPU, process time on a CPU
        with one torch thread (``kernels.timing.cpu_clock``)."""
        host, fwd = [], []
        tick = self.clock
        for _ in range(repeats):
            self._sync()
            t0 = tick()
            inp = self.prepare(ids, new, ctx)
            self._sync()
            t1 = tick()
            self.forward(inp)
            self._sync()
            t2 = tick()
            host.append(t1 - t0)
            fwd.append(t2 - t1)
        k = min(range(repeats), key=lambda i: host[i] + fwd[i])
        return host[k], fwd[k]


def blocks_needed(doc: dict, block_size: int) -> int:
    """KV blocks a plan needs if every request keeps its blocks to the end (plus the pad block)."""
    peak: dict[str, int] = {}
    for st in doc["steps"]:
        for i, n, c in zip(st["ids"], st["new"], st["ctx"]):
            peak[str(i)] = max(peak.get(str(i), 0), c + n)
    return 1 + sum(-(-t // block_size) for t in peak.values())


def weight_bytes(card, dtype: str = "bf16") -> int:
    return card.total_params * (4 if dtype == "fp32" else 2)


def replay(model: ReplayModel, doc: dict, repeats: int = 3, progress=None) -> list[tuple[float, float]]:
    """Measured (host, forward) seconds of every step of a plan document, in order; a request's
    blocks return to the pool after its last step."""
    last_step: dict[str, int] = {}
    for k, st in enumerate(doc["steps"]):
        for i in st["ids"]:
            last_step[str(i)] = k
    out = []
    for k, st in enumerate(doc["steps"]):
        out.append(model.time_step(st["ids"], st["new"], st["ctx"], repeats))
        for i in st["ids"]:
            if last_step[str(i)] == k:
                model.release(str(i))
        if progress:
            progress(k)
    return out


PROBE = ([(1, 128)] * 1, [(1, 128)] * 2, [(1, 128)] * 4, [(1, 128)] * 8, [(1, 128)] * 16,
         [(16, 0)], [(64, 0)], [(64, 0), (1, 128), (1, 128)])


def probe_overhead(model: ReplayModel, predict_ops, repeats: int = 5) -> dict:
    """Calibrate the per-step and per-sequence overhead the operator profile does not see.

    Runs a fixed set of probe steps on profiled grid shapes (decode batches of 1-16 at context
    128, prefill chunks at context 0), and fits ``measured - predicted operators = a + b * seqs``
    by least squares. ``predict_ops(new, ctx)`` returns the cost model's step time without its
    CPU term. The host-side preparation time is reported separately."""
    rows = []
    for shape in PROBE:  # warm-up: first calls of a shape pay one-off costs (allocator, kernel selection)
        ids = [f"warm.{j}" for j in range(len(shape))]
        model.time_step(ids, [n for n, _ in shape], [c for _, c in shape], 1)
        for i in ids:
            model.release(i)
    for k, shape in enumerate(PROBE):
        new = [n for n, _ in shape]
        ctx = [c for _, c in shape]
        ids = [f"probe{k}.{j}" for j in range(len(shape))]
        host, fwd = model.time_step(ids, new, ctx, repeats)
        for i in ids:
            model.release(i)
        rows.append((len(shape), host, fwd, predict_ops(new, ctx)))
    n = [r[0] for r in rows]
    resid = [r[1] + r[2] - r[3] for r in rows]
    mn, mr = statistics.fmean(n), statistics.fmean(resid)
    var = sum((a - mn) ** 2 for a in n)
    slope = sum((a - mn) * (b - mr) for a, b in zip(n, resid)) / var if var else 0.0
    icpt = mr - slope * mn
    return {
        "params": {"cpu_step_s": max(0.0, icpt), "cpu_per_seq_s": max(0.0, slope)},
        "raw_fit": {"intercept_s": icpt, "per_seq_s": slope},
        "host_prep_s": {"median": statistics.median(r[1] for r in rows), "by_probe": [r[1] for r in rows]},
        "probe": [{"seqs": r[0], "host_s": r[1], "forward_s": r[2], "predicted_ops_s": r[3]} for r in rows],
        "method": "least squares of (measured host + forward - predicted operators) on sequences per step "
                  "over fixed probe steps; clipped at 0",
    }
