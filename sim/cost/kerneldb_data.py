"""Reading the aiconfigurator-core kernel database (a dependency of servesim, pinned in
``pyproject.toml``) into small numpy grids, cached under the user's cache folder.

The package ships measured CUDA kernel latencies (milliseconds) as Parquet tables:
``<package>/systems/data/<system>/<op family>/<framework>/<version>/*.parquet``. This module
finds the installed package with importlib (nothing of it is copied into this repository),
picks a framework version, and derives what the cost model needs:

- ``gemm|<dtype>``: a dense (m, n, k) grid of latencies per GEMM dtype (``bfloat16``, ``fp8``,
  ``fp8_block``, ``nvfp4``), from the kernel the framework uses most for that dtype; the few
  cells the collection skipped are filled from the nearest measured m, scaled linearly in m,
  and every cell is capped by the latencies at larger m (``monotone_in_m``).
- ``ctx`` / ``gen``: the context (prefill) and generation (decode) attention rows, flat
  (batch, length, q heads, kv heads, head dim, kv dtype, latency), bf16 activations, no sliding
  window; the cost model cuts out the 2-D (batch, length) table of its model's shape.
- ``ar|<gpus>``: custom all-reduce latency by message size (elements of bf16) and GPU count,
  CUDA-graph variant where the framework records both.
- ``moe``: fused-MoE rows (tokens, hidden, intermediate, top-k, experts, moe tp, dtype).
- ``quant|compute_scale`` / ``quant|scale_matrix``: the framework's fp8 activation-quantisation
  kernels by (m tokens, k): the dynamic scale computation (amax) and the scaling to fp8. The
  fp8 GEMM tables time a dynamically quantised linear (both kernels and the GEMM); the cost
  model subtracts them where the engine runs a static scale or receives fp8 input
  (``sim.cost.kerneldb``).

``message_size`` counts elements, not bytes: at 2^29 elements over 8 H200s the vLLM all-reduce
takes 4.0 ms, a bus bandwidth of 2*(7/8)*2^30 B / 4.0 ms = 470 GB/s, which is NCCL's measured
all-reduce bus bandwidth on NVLink 4 (bytes would mean 235 GB/s, half of it).

Derived grids are written once per (package version, system, framework, version) as ``.npz`` to
``$XDG_CACHE_HOME/servesim/kerneldb/<package version>/`` (``~/.cache`` without XDG), so a run
that finds them starts without reading Parquet.
"""
from __future__ import annotations

import importlib.util
import os
import re
from functools import lru_cache
from pathlib import Path

import numpy as np

PACKAGE = "aiconfigurator_core"
DIST = "aiconfigurator-core"
FRAMEWORKS = ("vllm", "sglang", "trtllm")
SYSTEMS = {"a100-80gb": "a100_sxm", "h100-sxm": "h100_sxm", "h200-sxm": "h200_sxm", "b200": "b200_sxm",
           "b300": "b300_sxm", "gb200": "gb200", "gb300": "gb300",
           "l40s": "l40s"}
"""Catalog hardware id -> the database's system folder (same GPU, SXM form factor)."""
GEMM_DTYPE = {"bf16": "bfloat16", "fp16": "bfloat16", "fp8": "fp8", "fp8_block": "fp8_block",
              "fp4": "nvfp4", "nvfp4": "nvfp4", "mxfp4": "bfloat16",
              "int4": "bfloat16"}  # mxfp4 (gpt-oss), int4 (Kimi-K2.5): experts only
KV_DTYPE = {"bf16": "bfloat16", "fp16": "bfloat16", "fp8": "fp8"}
CACHE_FORMAT = 4  # bump when the derived layout changes


class KernelDbUnavailable(Exception):
    """The package is not installed, or does not cover the request (message says what)."""


def package_root() -> Path | None:
    """The installed package's folder, or None when the extra is not installed."""
    try:
        spec = importlib.util.find_spec(PACKAGE)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


@lru_cache(maxsize=1)
def package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(DIST)
    except PackageNotFoundError:
        return "unknown"


def _vkey(v: str):
    """Sort key for framework versions (1.3.0rc20 < 1.3.0rc23 < 1.3.0; 0.5.6.post2 > 0.5.6)."""
    try:
        from packaging.version import InvalidVersion, Version

        try:
            return (0, Version(v))
        except InvalidVersion:
            pass
    except ImportError:  # packaging is a dependency of the package itself; be safe anyway
        pass
    return (-1, tuple(int(x) if x.isdigit() else -1 for x in re.split(r"[.\-]", v)))


def data_dir(system: str) -> Path:
    root = package_root()
    if root is None:
        raise KernelDbUnavailable(f"the kernel database is not installed (pip install aiconfigurator-core==0.12.0, a dependency of servesim)")
    return root / "systems" / "data" / system


def versions(system: str, family: str, framework: str, table: str) -> list[str]:
    """Versions (oldest first) of ``framework`` holding ``<family>/<framework>/<v>/<table>.parquet``."""
    base = data_dir(system) / family / framework
    if not base.is_dir():
        return []
    return sorted((p.name for p in base.iterdir() if (p / f"{table}.parquet").is_file()), key=_vkey)


def framework_versions(system: str, framework: str) -> list[str]:
    """Versions with GEMM, context and generation attention tables: the ones that can price a step."""
    g = set(versions(system, "gemm", framework, "gemm_perf"))
    c = set(versions(system, "attention", framework, "context_attention_perf"))
    d = set(versions(system, "attention", framework, "generation_attention_perf"))
    return sorted(g & c & d, key=_vkey)


def resolve(hardware_id: str, framework: str, version: str | None) -> tuple[str, str]:
    """(system, version) for a catalog GPU, framework and optional version (newest by default)."""
    if package_root() is None:
        raise KernelDbUnavailable("the kernel database is not installed (pip install aiconfigurator-core==0.12.0, a dependency of servesim)")
    system = SYSTEMS.get(hardware_id)
    if system is None or not data_dir(system).is_dir():
        raise KernelDbUnavailable(f"the kernel database does not cover {hardware_id} "
                                  f"(covered: {', '.join(sorted(SYSTEMS))})")
    if framework not in FRAMEWORKS:
        raise KernelDbUnavailable(f"unknown framework {framework!r} (known: {', '.join(FRAMEWORKS)})")
    have = framework_versions(system, framework)
    if not have:
        raise KernelDbUnavailable(f"the kernel database has no {framework} data for {system}")
    if version is None:
        return system, have[-1]
    if version not in have:
        raise KernelDbUnavailable(f"the kernel database has no {framework} {version} data for {system} "
                                  f"(versions: {', '.join(have)})")
    return system, version


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "servesim" / "kerneldb" / package_version()


# ---------------------------------------------------------------------------- deriving grids

def min_grid(xs: np.ndarray, ys: np.ndarray, ts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A 2-D table from rows (x, y, t): the sorted distinct x and y, and the minimum t of each
    cell (the fastest kernel measured there), empty cells filled along x, then along y."""
    b, s = np.unique(xs), np.unique(ys)
    t = np.full((len(b), len(s)), np.inf)
    np.minimum.at(t, (np.searchsorted(b, xs), np.searchsorted(s, ys)), ts)
    t[np.isinf(t)] = np.nan
    t = _fill_axis0(t, b)
    if np.isnan(t).any():
        t = _fill_axis0(t.T, s).T
    return b, s, t


def _fill_axis0(t: np.ndarray, xs: np.ndarray) -> np.ndarray:
    """Fill NaN cells along axis 0 from the nearest measured cell on that axis, scaled by
    x / x_near when x is larger (work grows linearly in tokens or batch) and kept otherwise."""
    t = t.copy()
    flat = t.reshape(len(xs), -1)
    for j in range(flat.shape[1]):
        col = flat[:, j]
        ok = np.flatnonzero(~np.isnan(col))
        if len(ok) == 0 or len(ok) == len(col):
            continue
        for i in np.flatnonzero(np.isnan(col)):
            near = ok[np.argmin(np.abs(np.log(xs[ok]) - np.log(xs[i])))]
            col[i] = col[near] * max(1.0, xs[i] / xs[near])
    return flat.reshape(t.shape)


def monotone_in_m(t: np.ndarray) -> np.ndarray:
    """Latencies along axis 0 (m) capped by every larger m: a GEMM of m rows can always run as
    the larger one padded, so t(m) <= t(m') for m < m'. Removes the isolated slow cells some
    collections hold at small m (B200 vLLM fp8: 24-34 us at m = 1, 2, 4 between 8-17 us
    neighbours), which interpolation would otherwise spread over the decode batch sizes."""
    return np.minimum.accumulate(t[::-1], axis=0)[::-1]


def _grid(df, axes: list[str]) -> tuple[list[np.ndarray], np.ndarray]:
    """A dense grid of the minimum latency (seconds) over ``axes``, NaN where unmeasured."""
    g = df.groupby(axes, sort=True)["latency"].min()
    ax = [np.array(sorted(df[a].unique()), dtype=float) for a in axes]
    t = np.full([len(a) for a in ax], np.nan)
    idx = tuple(np.searchsorted(a, g.index.get_level_values(i).to_numpy(dtype=float)) for i, a in enumerate(ax))
    t[idx] = g.to_numpy() / 1e3
    return ax, t


# columns that older collections lack, with the value they imply (e.g. a100_sxm's vllm 0.14.0
# attention tables predate sliding-window runs: every row is full attention)
OPTIONAL_COLUMNS = {"window_size": 0}


def _read(path: Path, columns: list[str] | None = None):
    import pandas as pd
    import pyarrow.parquet as pq

    if columns is None:
        return pd.read_parquet(path)
    have = set(pq.read_schema(path).names)
    df = pd.read_parquet(path, columns=[c for c in columns if c in have or c not in OPTIONAL_COLUMNS])
    for c in columns:
        if c not in have and c in OPTIONAL_COLUMNS:
            df[c] = OPTIONAL_COLUMNS[c]
    return df


def _main_kernel(df, col: str):
    """For each value of ``col`` keep the kernel source with the most rows (the framework's default)."""
    keep = []
    for _, g in df.groupby(col):
        src = g["kernel_source"].value_counts().idxmax()
        keep.append(g[g["kernel_source"] == src])
    import pandas as pd

    return pd.concat(keep) if keep else df


def derive(system: str, framework: str, version: str) -> dict[str, np.ndarray]:
    """Every grid the cost model needs for (system, framework, version), as named arrays."""
    d = data_dir(system)
    out: dict[str, np.ndarray] = {}
    meta: dict[str, str] = {}
    # GEMMs
    gemm = _main_kernel(_read(d / "gemm" / framework / version / "gemm_perf.parquet",
                              ["kernel_source", "gemm_dtype", "m", "n", "k", "latency"]), "gemm_dtype")
    for dt, g in gemm.groupby("gemm_dtype"):
        (m, n, k), t = _grid(g, ["m", "n", "k"])
        t = _fill_axis0(t, m)
        if np.isnan(t).any():  # an (n, k) pair never measured: fill along n, then k
            t = np.moveaxis(_fill_axis0(np.moveaxis(t, 1, 0), n), 0, 1)
            t = np.moveaxis(_fill_axis0(np.moveaxis(t, 2, 0), k), 0, 2)
        t = monotone_in_m(t)
        out[f"gemm|{dt}|m"], out[f"gemm|{dt}|n"], out[f"gemm|{dt}|k"], out[f"gemm|{dt}|t"] = m, n, k, t
        meta[f"gemm {dt}"] = str(g["kernel_source"].iloc[0])
    # attention
    cols = ["kernel_source", "batch_size", "isl", "num_heads", "num_key_value_heads", "head_dim", "attn_dtype",
            "kv_cache_dtype", "step", "window_size", "latency"]
    for name, table, length in (("ctx", "context_attention_perf", "isl"), ("gen", "generation_attention_perf", "step")):
        a = _read(d / "attention" / framework / version / f"{table}.parquet", cols)
        a = a[(a["window_size"] == 0) & (a["attn_dtype"] == "bfloat16")]
        src = a["kernel_source"].value_counts().idxmax()
        a = a[a["kernel_source"] == src]
        meta[f"attention {name}"] = str(src)
        ln = a[length].to_numpy(dtype=float) + (1.0 if name == "gen" else 0.0)  # gen: past tokens + the new one
        out[f"{name}|rows"] = np.column_stack([
            a["batch_size"].to_numpy(dtype=float), ln, a["num_heads"].to_numpy(dtype=float),
            a["num_key_value_heads"].to_numpy(dtype=float), a["head_dim"].to_numpy(dtype=float),
            (a["kv_cache_dtype"] == "fp8").to_numpy(dtype=float), a["latency"].to_numpy(dtype=float) / 1e3])
    # all-reduce: the framework's own custom all-reduce, same version if collected, else the newest
    comm_v = versions(system, "comm", framework, "custom_allreduce_perf")
    if comm_v:
        cv = version if version in comm_v else comm_v[-1]
        ar = _read(d / "comm" / framework / cv / "custom_allreduce_perf.parquet")
        graph = ar[ar["kernel_source"].str.contains("graph", case=False)] if "kernel_source" in ar else ar
        ar = graph if len(graph) else ar
        meta["all_reduce"] = f"{framework} {cv} {ar['kernel_source'].iloc[0]}"
        for gpus, g in ar.groupby("num_gpus"):
            (x,), t = _grid(g, ["message_size"])
            out[f"ar|{int(gpus)}|x"], out[f"ar|{int(gpus)}|t"] = x, t
    else:
        nccl_v = versions(system, "comm", "nccl", "nccl_perf")
        if nccl_v:
            ar = _read(d / "comm" / "nccl" / nccl_v[-1] / "nccl_perf.parquet")
            ar = ar[(ar["op_name"] == "all_reduce") & (ar["nccl_dtype"] == "half")]
            meta["all_reduce"] = f"nccl {nccl_v[-1]}"
            for gpus, g in ar.groupby("num_gpus"):
                (x,), t = _grid(g, ["message_size"])
                out[f"ar|{int(gpus)}|x"], out[f"ar|{int(gpus)}|t"] = x, t
    # fused MoE
    moe_v = versions(system, "moe", framework, "moe_perf")
    if moe_v:
        mv = version if version in moe_v else moe_v[-1]
        mo = _read(d / "moe" / framework / mv / "moe_perf.parquet")
        mo = mo[(mo["moe_ep_size"] == 1) & (mo["distribution"] == "balanced")] if "distribution" in mo else mo
        dt_code = {"bfloat16": 0, "fp8": 1, "fp8_block": 2, "nvfp4": 3}
        mo = mo[mo["moe_dtype"].isin(dt_code)]
        meta["moe"] = f"{framework} {mv}"
        out["moe|rows"] = np.column_stack([mo[c].to_numpy(dtype=float) for c in
                                           ("num_tokens", "hidden_size", "inter_size", "topk", "num_experts",
                                            "moe_tp_size")]
                                          + [mo["moe_dtype"].map(dt_code).to_numpy(dtype=float),
                                             mo["latency"].to_numpy(dtype=float) / 1e3])
    # fp8 activation quantisation (dynamic scale, scaling), same version if collected
    quant_v = versions(system, "quantize", framework, "computescale_perf")
    if quant_v:
        qv = version if version in quant_v else quant_v[-1]
        for name, table in (("compute_scale", "computescale_perf"), ("scale_matrix", "scale_matrix_perf")):
            path = d / "quantize" / framework / qv / f"{table}.parquet"
            if not path.is_file():
                continue
            q = _read(path, ["kernel_source", "m", "k", "quant_dtype", "latency"])
            q = q[q["quant_dtype"] == "fp8"]
            if not len(q):
                continue
            (m, k), t = _grid(q, ["m", "k"])
            # some collections store a difference of two kernels (vLLM: dynamic minus static
            # quantisation), zero where they tie: floor at 1 ns so log-interpolation holds
            t = np.where(np.isnan(t), t, np.maximum(t, 1e-9))
            t = _fill_axis0(t, m)
            if np.isnan(t).any():
                t = _fill_axis0(t.T, k).T
            out[f"quant|{name}|m"], out[f"quant|{name}|k"], out[f"quant|{name}|t"] = m, k, t
            meta[f"quant {name}"] = f"{framework} {qv} {q['kernel_source'].iloc[0]}"
    out["meta"] = np.array([f"{k}={v}" for k, v in sorted(meta.items())])
    return out


def load(system: str, framework: str, version: str, *, use_cache: bool = True) -> dict[str, np.ndarray]:
    """The derived grids for (system, framework, version), from the cache when present."""
    path = cache_root() / f"v{CACHE_FORMAT}" / f"{system}__{framework}__{version}.npz"
    return cached_arrays(path, lambda: derive(system, framework, version), use_cache)


def cached_arrays(path: Path, make, use_cache: bool = True) -> dict[str, np.ndarray]:
    """``make()``'s arrays, kept as ``.npz`` at ``path`` (written atomically; a torn or foreign
    file is made again, a read-only cache folder is skipped)."""
    if use_cache and path.is_file():
        try:
            with np.load(path, allow_pickle=False) as z:
                return {k: z[k] for k in z.files}
        except (OSError, ValueError):
            pass  # a torn or foreign file: derive again
    arrays = make()
    if use_cache:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f"{path.stem}.{os.getpid()}.tmp.npz")
            np.savez(tmp, **arrays)
            os.replace(tmp, path)
        except OSError:
            pass  # a read-only home: run without the cache
    return arrays
