"""Cost models: the roofline (always available) and profiled tables (when calibrated)."""
from __future__ import annotations

import warnings

from sim.cost.base import CostModel
from sim.cost.profiled import fitted_gpu_average, load_profiled_cost_model
from sim.cost.roofline import RooflineCostModel, RooflineParams
from sim.errors import ConfigError, ServesimWarning

__all__ = ["CostModel", "RooflineCostModel", "RooflineParams", "make_cost_model"]


def make_cost_model(cfg, model, hw) -> CostModel:
    """``_make_cost_model``, with the config's tiered KV cache's transfer pricing (``kv.*`` latency
    and disk bandwidth, ``sim.kv.tiers.host_link``) when it has one."""
    cm = _make_cost_model(cfg, model, hw)
    if cfg.kv.host_tier is not None:
        from sim.kv.tiers import host_link

        cm.link = host_link(cfg, hw, cm.host_link().block_bytes)  # (the card's link priced the block first)
    return cm


def _make_cost_model(cfg, model, hw) -> CostModel:
    """The cost model a config asks for: ``profiled`` when a profile for (hardware, model, dtype)
    exists (``auto``) or is demanded (``profiled``, an error if missing); else ``kerneldb`` when
    the aiconfigurator-core database is installed and covers the GPU and dtype (``auto``) or is
    demanded (``kerneldb``, an error naming the reason if not); else the roofline. The
    roofline's efficiency factors are the documented defaults, the user's ``cost.roofline``, or,
    when the user set none and a fitted root holds a GPU average (``servesim fit`` over several
    profiled GPUs writes ``roofline_params.json`` there), those fitted factors, so unprofiled GPUs
    improve from the profiled ones."""
    params = RooflineParams(**cfg.cost.roofline.model_dump())
    kw = dict(tp=cfg.parallelism.tp, pp=cfg.parallelism.pp, dtype=cfg.dtype, kv_dtype=cfg.kv_dtype,
              block_size=cfg.kv.block_size, act_dtype=cfg.act_dtype, comm_dtype=cfg.comm_dtype,
              sampling=cfg.cost.sampling)
    user = user_set_params(cfg)
    par = cfg.parallelism
    c = cfg.cost
    if par.ep > 1 or par.dp > 1 or c.expert_skew != 1.0 or c.expert_distribution != "balanced" \
            or c.moe_dispatch != "allgather":
        kw |= dict(ep=par.ep, dp=par.dp, expert_distribution=c.expert_distribution, expert_skew=c.expert_skew,
                   moe_dispatch=c.moe_dispatch)
        if cfg.cost.model == "profiled":
            raise ConfigError("cost.model: profiles are measured at tensor parallelism only; expert parallelism, "
                              "attention data parallelism and the expert-load knobs need roofline or kerneldb")
    if cfg.cost.model == "kerneldb":
        return _kerneldb(cfg, model, hw, params, kw)
    if cfg.cost.model != "roofline":
        cm = None if "ep" in kw else load_profiled_cost_model(
            model, hw, params=params, profiles_dir=cfg.cost.profiles_dir, required=cfg.cost.model == "profiled",
            user_params=user, **kw)
        if cm is not None:
            for note in ([cm.user_note] if cm.user_note else []) + cm.profile_warnings:
                warnings.warn(note, ServesimWarning, stacklevel=2)  # --set won; a profile taken under load
            return cm
        if cfg.cost.model == "profiled":
            raise ConfigError(f"cost.model: no profile for ({hw.id}, {model.id}, {cfg.dtype}); run servesim profile + fit, or use auto")
        if cfg.dtype == "fp32":
            raise ConfigError(f"dtype fp32: priced only from a profile with fp32 rows, and there is none for "
                              f"({hw.id}, {model.id}); profile with --dtype fp32, fit, and point cost.profiles_dir at "
                              "the fitted root")
        cm = _kerneldb(cfg, model, hw, params, kw)
        if not isinstance(cm, str):
            return cm
        why = cm  # (auto: why the kernel database does not price this run)
    else:
        why = None
    if cfg.dtype == "fp32":
        raise ConfigError("dtype fp32: priced only from a profile with fp32 rows (cost.model auto or profiled); "
                          "the roofline has no fp32 peak")
    source = "defaults"
    if cfg.cost.roofline == type(cfg.cost.roofline)():  # the user set no factor: use fitted GPU ones
        fitted = fitted_gpu_average(cfg.cost.profiles_dir)
        if fitted is not None:
            path, values = fitted
            params = RooflineParams(**{**params.as_dict(), **values})
            source = f"fitted on profiled GPUs ({path})"
    cm = RooflineCostModel(model, hw, params=params, **kw)
    cm.params_source = source
    cm.fallback_reason = why
    return cm


def user_set_params(cfg) -> tuple[str, ...]:
    """The ``cost.roofline`` fields the user set (to a value other than the default): these win
    over fitted values, which ``make_cost_model`` notes."""
    user, default = cfg.cost.roofline.model_dump(), type(cfg.cost.roofline)().model_dump()
    return tuple(k for k in user if user[k] != default[k])


def _kerneldb(cfg, model, hw, params: RooflineParams, kw: dict):
    """The kernel-database model, or under ``auto`` the reason it cannot price the run (a string:
    not installed, or it does not cover the request; ``cost.model: kerneldb`` turns that into a
    one-line ConfigError). A framework
    version the user named must exist, under ``auto`` too. The fitted engine overhead replaces the
    roofline's CPU defaults unless the user set ``cost.roofline.cpu_*``."""
    from sim.cost.kerneldb import load_kerneldb_cost_model
    from sim.cost.kerneldb_data import KernelDbUnavailable, package_root
    from sim.errors import ConfigError

    c = cfg.cost
    if package_root() is None and c.model == "auto":
        return "aiconfigurator-core, the kernel database, is not installed"
    try:
        moe = {} if c.moe_table in ("framework", c.framework) else {"moe_table": c.moe_table}
        cm = load_kerneldb_cost_model(model, hw, framework=c.framework, version=c.framework_version,
                                      params=params, **moe, **kw)
    except KernelDbUnavailable as e:
        if c.model == "kerneldb" or (c.framework_version is not None and "versions:" in str(e)):
            raise ConfigError(f"cost.model kerneldb: {e}") from None
        return str(e)
    user = c.roofline.model_dump()
    default = type(c.roofline)().model_dump()
    for k in ("cpu_per_token_s", "cpu_per_seq_ctx_s"):
        if user[k] != default[k]:
            raise ConfigError(f"cost.roofline.{k}: the kernel-database model prices its engine overhead per step and "
                              "per sequence only; use cost.model profiled or roofline for this term")
    for k in ("cpu_step_s", "cpu_per_seq_s"):
        if user[k] != default[k]:
            setattr(cm, "p", type(cm.p)(**{**cm.p.as_dict(), k: user[k]}))
            cm.overhead_source = "set by the user (cost.roofline)"
    return cm
