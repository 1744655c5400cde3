"""The ``servesim`` command. Each subcommand lives in ``sim/commands/<name>.py`` and exposes
``register(subparsers)``, which adds its parser and sets ``func(args) -> int``; adding a
command is one line in ``COMMANDS``. User errors (``ServesimError``) print one message and
exit 2, never a traceback."""
from __future__ import annotations

import argparse
import importlib
import sys
import warnings

from sim.errors import ServesimError, ServesimWarning

COMMANDS = [
    "sim.commands.run",
    "sim.commands.catalog",
    "sim.commands.trace",
    "sim.commands.profile",
    "sim.commands.calibrate",
    "sim.commands.sweep",
    "sim.commands.compare",
    "sim.commands.validate_silicon",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="servesim", description="Simulate LLM inference serving before buying GPUs.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(name).register(sub)
    return parser


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """``ServesimWarning``: one plain line on stderr; other warnings as Python prints them."""
    if issubclass(category, ServesimWarning):
        print(f"servesim: warning: {message}", file=file or sys.stderr)
    else:
        _python_showwarning(message, category, filename, lineno, file, line)


_python_showwarning = warnings.showwarning


def main(argv: list[str] | None = None) -> int:
    warnings.showwarning = _show_warning
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    try:
        return int(args.func(args) or 0)
    except ServesimError as e:
        print(f"servesim: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("servesim: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
