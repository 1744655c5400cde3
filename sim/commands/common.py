"""Argument helpers shared by the subcommands: ``--set`` overrides and shortcut flags.

A shortcut is ``(flag, dotted config key, type, help)``; ``--model X`` is ``--set model=X``.
"""
from __future__ import annotations

import argparse
import math


def add_set_arg(p, help_: str = "override any config key by its dotted path (repeatable)") -> None:
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE", help=help_)


def choices(key: str) -> str:
    """The registered names a config key takes (schedulers, routers), for a flag's help."""
    if key == "scheduler.name":
        from sim.scheduler import REGISTRY as names
    elif key == "cluster.router":
        from sim.cluster import ROUTERS as names
    else:
        return ""
    return f": {', '.join(sorted(names))}"


def add_config_args(p, shortcuts) -> None:
    """``--set`` plus one flag per shortcut (a scheduler or router flag lists the names it takes)."""
    add_set_arg(p)
    for flag, key, typ, help_ in shortcuts:
        p.add_argument(flag, dest=key.replace(".", "__"), type=typ, metavar=flag.lstrip("-").replace("-", "_").upper(),
                       help=f"{help_}{choices(key)} (= --set {key}=...)")


def shortcut_sets(args, shortcuts, rename=None) -> list[str]:
    """``key=value`` strings for the shortcut flags given (``rename`` may map a key), then ``--set``s."""
    sets = []
    for _, key, _, _ in shortcuts:
        v = getattr(args, key.replace(".", "__"), None)
        if v is not None:
            sets.append(f"{rename(key) if rename else key}={v}")
    return sets + list(args.sets)


# ---- flag types: a bad value is a one-line usage error, before anything runs ---------------

def _number(text: str, kind, name: str):
    try:
        v = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {name}") from None
    if kind is float and not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return v


def finite_float(text: str) -> float:
    """A float flag: NaN and inf are errors."""
    return _number(text, float, "a number")


def positive_float(text: str) -> float:
    v = _number(text, float, "a number")
    if v <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be above 0")
    return v


def positive_int(text: str) -> int:
    v = _number(text, int, "an integer")
    if v < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return v


def nonneg_int(text: str) -> int:
    v = _number(text, int, "an integer")
    if v < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 0")
    return v


class HelpFormatter(argparse.HelpFormatter):
    """``--help`` with each flag's default once: appended as ``(default: X)`` only when the
    flag has a real default and its help does not already say what the default is."""

    def _get_help_string(self, action):
        help_ = action.help or ""
        if ("default" in help_.lower() or action.default in (None, False, [], argparse.SUPPRESS)
                or action.option_strings == [] or action.nargs == 0):
            return help_
        return help_ + " (default: %(default)s)"


def int_list(text: str) -> list[int]:
    """``1,2,4`` -> [1, 2, 4]: positive integers, comma-separated."""
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise argparse.ArgumentTypeError(f"{text!r} holds no integers")
    return [positive_int(t) for t in items]
