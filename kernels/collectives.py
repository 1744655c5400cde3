"""all_reduce / all_gather timed through torch.distributed: NCCL across GPUs, gloo across CPU
processes (so the path is tested in CI). One process per rank, spawned here; rank 0 reports."""
from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import replace

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from kernels.ops import torch_dtype
from kernels.timing import TimingConfig, measure


def _worker(rank: int, world: int, init_file: str, device_type: str, points: list[dict],
            timing: TimingConfig, threads: int, result_path: str) -> None:
    if device_type == "cpu":
        torch.set_num_threads(threads)
        device, backend = torch.device("cpu"), "gloo"
    else:
        torch.cuda.set_device(rank)
        device, backend = torch.device("cuda", rank), "nccl"
    dist.init_process_group(backend, init_method=f"file://{init_file}", rank=rank, world_size=world)
    rows = []
    try:
        for key in points:
            dt = torch_dtype(key["dtype"])
            n = max(1, key["bytes"] // torch.tensor([], dtype=dt).element_size())
            x = torch.randn(n, device=device).to(dt)
            if key["op"] == "all_reduce":
                fn = lambda: dist.all_reduce(x)  # noqa: E731
            elif backend == "nccl":
                out = torch.empty(world * n, dtype=dt, device=device)
                fn = lambda: dist.all_gather_into_tensor(out, x)  # noqa: E731
            else:
                outs = [torch.empty_like(x) for _ in range(world)]
                fn = lambda: dist.all_gather(outs, x)  # noqa: E731
            stats = measure(fn, device, timing, before=dist.barrier, clock=time.perf_counter)  # waits: wall clock
            rows.append({**key, **stats.row()})
    finally:
        dist.destroy_process_group()
    if rank == 0:
        with open(result_path, "w") as f:
            json.dump(rows, f)


def profile_collectives(points: list[dict], world_size: int, device_type: str, timing: TimingConfig,
                        threads: int = 1) -> list[dict]:
    """Time collective ``points`` (keys of family ``collective``) at one world size; returns rows."""
    # Every rank must run the same number of repeats, so none is cut by the time cap or extended
    # by its own spread (the ranks would disagree and deadlock at the barrier).
    timing = replace(timing, min_repeats=timing.repeats, max_repeats=0)
    with tempfile.TemporaryDirectory() as tmp:
        init_file, result = os.path.join(tmp, "init"), os.path.join(tmp, "rows.json")
        mp.spawn(_worker, args=(world_size, init_file, device_type, points, timing, threads, result),
                 nprocs=world_size, join=True)
        with open(result) as f:
            return json.load(f)
