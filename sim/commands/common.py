"""Argument helpers shared by the subcommands: ``--set`` overrides and shortcut flags.

A shortcut is ``(flag, dotted config key, type, help)``; ``--model X`` is ``--set model=X``.
"""
from __future__ import annotations


def add_set_arg(p, help_: str = "override any config key by its dotted path (repeatable)") -> None:
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE", help=help_)


def add_config_args(p, shortcuts) -> None:
    """``--set`` plus one flag per shortcut."""
    add_set_arg(p)
    for flag, key, typ, help_ in shortcuts:
        p.add_argument(flag, dest=key.replace(".", "__"), type=typ, help=f"{help_} (= --set {key}=...)")


def shortcut_sets(args, shortcuts, rename=None) -> list[str]:
    """``key=value`` strings for the shortcut flags given (``rename`` may map a key), then ``--set``s."""
    sets = []
    for _, key, _, _ in shortcuts:
        v = getattr(args, key.replace(".", "__"), None)
        if v is not None:
            sets.append(f"{rename(key) if rename else key}={v}")
    return sets + list(args.sets)
