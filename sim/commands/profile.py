"""``servesim profile``: profile a model's operators on this machine's GPU (or CPU) with PyTorch.

Same flags as ``python -m kernels.profile``; writes ``<out>/<hardware>/<model>/*.csv`` and
``meta.json`` (docs/profiles.md). torch is imported only when the command runs: the simulator
installs without it.
"""
from __future__ import annotations

from sim.errors import ServesimError


def register(sub) -> None:
    from kernels.args import add_arguments

    p = sub.add_parser("profile", help="profile kernels (GEMM, attention, ...) into calibration profiles; needs torch")
    add_arguments(p)
    p.set_defaults(func=run, out_is_root=True)


def run(args) -> int:
    try:
        import torch  # noqa: F401
    except ImportError:
        raise ServesimError("servesim profile needs PyTorch: pip install -e '.[torch]' in the servesim checkout") from None
    from kernels.profile import ProfileError, main_args

    try:
        return main_args(args)
    except ProfileError as e:
        raise ServesimError(str(e)) from None
