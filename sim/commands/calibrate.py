"""``servesim fit``, ``servesim validate`` and ``servesim calibrate-engine``: profiles -> fitted
tables; validation against measurements; the engine's host overhead fitted from the engine's own
timings (docs/calibration.md). ``fit`` and ``calibrate-engine`` need numpy only; ``validate``
needs torch and is imported only when it runs."""
from __future__ import annotations

from sim.errors import ServesimError


def register(sub) -> None:
    from calibration.fit import add_arguments as fit_args

    p = sub.add_parser("fit", help="fit profile CSVs into the tables the simulator loads (numpy only)",
                       description="Fit profile CSVs into tables, held-out points and roofline factors.")
    fit_args(p)
    p.set_defaults(func=run_fit, out_is_root=True)
    from calibration.validate import add_arguments as val_args

    v = sub.add_parser("validate", help="validate fitted tables: held-out kernels and a real replay (needs torch)",
                       description="Held-out kernel error and a real PyTorch replay of simulated step plans.")
    val_args(v)
    v.set_defaults(func=run_validate, out_is_root=True)
    from calibration.engine import add_arguments as engine_args

    e = sub.add_parser("calibrate-engine", help="fit your engine's host overhead (per step, sequence, context token) "
                       "from its measured times", description="Fit the host overhead of your own engine from its "
                       "static-batch times or vllm bench serve results, on some rows, and report the error on the rest.")
    engine_args(e)
    e.set_defaults(func=run_engine, out_is_root=True)


def run_fit(args) -> int:
    from calibration.fit import FitError, run

    try:
        return run(args)
    except FitError as e:
        raise ServesimError(str(e)) from None


def run_validate(args) -> int:
    try:
        import torch  # noqa: F401
    except ImportError:
        raise ServesimError("servesim validate needs PyTorch: pip install -e '.[torch]' in the servesim checkout") from None
    from calibration.validate import ValidateError, run

    try:
        run(args)
    except ValidateError as e:
        raise ServesimError(str(e)) from None
    return 0


def run_engine(args) -> int:
    from calibration.engine import EngineCalibrationError, report, run

    try:
        print(report(run(args)))
    except EngineCalibrationError as e:
        raise ServesimError(str(e)) from None
    return 0
