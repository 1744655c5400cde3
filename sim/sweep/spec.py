"""Sweep specs: a base config varied over a grid.

```yaml
base: experiments/base.yaml        # a config path (relative to this file) or an inline mapping
grid:                               # cartesian product over these dotted keys
  workload.rate: [2, 4, 8]
  scheduler.name: [vllm, static]
zip:                                # each group's lists are varied together (same length)
  - {hardware: [h100-sxm, a100-80gb], parallelism.tp: [1, 2]}
seeds: [0, 1, 2]                    # every point runs once per seed (default: the base seed)
set: ["workload.num_requests=600"]  # optional overrides applied to the base first
```

Points are ordered grid-major (the first grid key varies slowest), then zip groups, then seeds,
so the results table has a stable order whatever order the runs finish in.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path

import yaml

from sim.config import apply_overrides, read_yaml
from sim.errors import ConfigError


@dataclass(frozen=True)
class Point:
    """One run of a sweep: the values it varies (dotted key -> value), its seed and its config."""

    values: dict
    seed: int
    config: dict


@dataclass(frozen=True)
class SweepSpec:
    base: dict
    grid: dict
    zips: list
    seeds: list | None

    @property
    def varied(self) -> list[str]:
        keys = list(self.grid)
        for z in self.zips:
            keys += [k for k in z if k not in keys]
        return keys

    def points(self) -> list[Point]:
        axes = [[{k: v} for v in vals] for k, vals in self.grid.items()]
        for z in self.zips:
            n = len(next(iter(z.values())))
            axes.append([{k: vals[i] for k, vals in z.items()} for i in range(n)])
        seeds = self.seeds if self.seeds is not None else [self.base.get("seed", 0)]
        out = []
        for combo in itertools.product(*axes):
            values: dict = {}
            for part in combo:
                values.update(part)
            sets = [f"{k}={_yaml_scalar(v)}" for k, v in values.items()]
            cfg = apply_overrides(self.base, sets)
            for s in seeds:
                out.append(Point(values, int(s), {**cfg, "seed": int(s)}))
        return out


def _yaml_scalar(v) -> str:
    return yaml.safe_dump(v, default_flow_style=True).strip().removesuffix("...").strip()


def parse_spec(data: dict, where: Path | None = None) -> SweepSpec:
    """Validate a spec mapping; ``where`` is the folder relative paths start from."""
    name = "sweep spec"
    unknown = set(data) - {"base", "grid", "zip", "seeds", "set"}
    if unknown:
        raise ConfigError(f"{name}: unknown key(s) {sorted(unknown)} (known: base, grid, zip, seeds, set)")
    base = data.get("base") or {}
    if isinstance(base, str):
        p = Path(base)
        if not p.is_absolute() and where is not None:
            p = where / p
        base = read_yaml(p)
    if not isinstance(base, dict):
        raise ConfigError(f"{name}: base must be a config mapping or a path")
    base = apply_overrides(base, list(data.get("set") or []))
    grid = data.get("grid") or {}
    if not isinstance(grid, dict):
        raise ConfigError(f"{name}: grid must map dotted keys to lists of values")
    for k, v in grid.items():
        if not isinstance(v, list) or not v:
            raise ConfigError(f"{name}: grid.{k} must be a non-empty list")
    zips = data.get("zip") or []
    if isinstance(zips, dict):
        zips = [zips]
    for i, z in enumerate(zips):
        lens = {k: len(v) if isinstance(v, list) else -1 for k, v in z.items()}
        if not z or min(lens.values()) < 1 or len(set(lens.values())) != 1:
            raise ConfigError(f"{name}: zip[{i}] must map keys to non-empty lists of one length, got {lens}")
    seeds = data.get("seeds")
    if seeds is not None and (not isinstance(seeds, list) or not all(isinstance(s, int) and s >= 0 for s in seeds)):
        raise ConfigError(f"{name}: seeds must be a list of non-negative integers")
    return SweepSpec(base, dict(grid), list(zips), seeds)


def load_spec(path: str | Path) -> SweepSpec:
    path = Path(path)
    return parse_spec(read_yaml(path), path.parent)
