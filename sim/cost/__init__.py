"""Cost models: the roofline (always available) and profiled tables (when calibrated)."""
from __future__ import annotations

from sim.cost.base import CostModel
from sim.cost.roofline import RooflineCostModel, RooflineParams

__all__ = ["CostModel", "RooflineCostModel", "RooflineParams", "make_cost_model"]


def make_cost_model(cfg, model, hw) -> CostModel:
    """The cost model a config asks for: ``profiled`` when a profile for (hardware, model, dtype)
    exists (``auto``) or is demanded (``profiled``, an error if missing), else the roofline. The
    roofline's efficiency factors are the documented defaults, the user's ``cost.roofline``, or,
    when the user set none and a fitted root holds a GPU average (``servesim fit`` over several
    profiled GPUs writes ``roofline_params.json`` there), those fitted factors, so unprofiled GPUs
    improve from the profiled ones."""
    params = RooflineParams(**cfg.cost.roofline.model_dump())
    kw = dict(tp=cfg.parallelism.tp, pp=cfg.parallelism.pp, dtype=cfg.dtype, kv_dtype=cfg.kv_dtype,
              block_size=cfg.kv.block_size, act_dtype=cfg.precision.activations, comm_dtype=cfg.comm_dtype)
    if cfg.cost.model != "roofline":
        try:
            from sim.cost.profiled import load_profiled_cost_model
        except ModuleNotFoundError as e:
            if e.name != "sim.cost.profiled":
                raise
            load_profiled_cost_model = None
        if load_profiled_cost_model is not None:
            cm = load_profiled_cost_model(model, hw, params=params, profiles_dir=cfg.cost.profiles_dir,
                                          required=cfg.cost.model == "profiled", **kw)
            if cm is not None:
                return cm
        if cfg.cost.model == "profiled":
            from sim.errors import ConfigError

            raise ConfigError(f"cost.model: no profile for ({hw.id}, {model.id}, {cfg.dtype}); run servesim profile + fit, or use auto")
    source = "defaults"
    if cfg.cost.roofline == type(cfg.cost.roofline)():  # the user set no factor: use fitted GPU ones
        try:
            from sim.cost.profiled import fitted_gpu_average
        except ModuleNotFoundError as e:
            if e.name != "sim.cost.profiled":
                raise
        else:
            fitted = fitted_gpu_average(cfg.cost.profiles_dir)
            if fitted is not None:
                path, values = fitted
                params = RooflineParams(**{**params.as_dict(), **values})
                source = f"fitted on profiled GPUs ({path})"
    cm = RooflineCostModel(model, hw, params=params, **kw)
    cm.params_source = source
    return cm
