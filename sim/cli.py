"""The ``servesim`` command. Each subcommand lives in ``sim/commands/<name>.py`` and exposes
``register(subparsers)``, which adds its parser and sets ``func(args) -> int``; adding a
command is one line in ``COMMANDS``.

``main`` is the one error boundary of the command line: whatever goes wrong ends as one line
on stderr and an exit code, never a traceback.

- bad usage (argparse) and the project's errors (``ServesimError``: config, trace, capacity;
  ``CatalogError``): ``servesim: error: <message>``, exit 2;
- a run that served nothing because every request was rejected: the reason and the knob to
  change on stderr, exit 3 (the results folder is written);
- Ctrl-C or SIGTERM: ``servesim: interrupted``, exit 130 (143 for SIGTERM);
- stdout closed early (``servesim run | head``): quiet, exit 0 (the results folder is
  already written);
- anything else is a bug: ``servesim: internal error: <type>: <message>``, exit 1, with a hint
  that ``SERVESIM_DEBUG=1`` shows the traceback (which is then raised as is).
"""
from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
import warnings
from pathlib import Path

from sim.errors import ServesimError, ServesimWarning

COMMANDS = {
    "sim.commands.run": ("run",),
    "sim.commands.catalog": ("catalog",),
    "sim.commands.trace": ("trace",),
    "sim.commands.profile": ("profile",),
    "sim.commands.calibrate": ("fit", "validate", "calibrate-engine"),
    "sim.commands.sweep": ("sweep", "capacity", "plan", "ab", "report"),
    "sim.commands.compare": ("compare",),
    "sim.commands.validate_silicon": ("validate-silicon",),
}
"""Each module and the subcommands it registers (``build_parser`` imports only the module of the
command being run: some build their help from heavy modules, and start-up time counts)."""

EXIT_USAGE = 2
EXIT_BUG = 1
EXIT_INTERRUPTED = 130


class Parser(argparse.ArgumentParser):
    """argparse with a one-line error (the usage is one ``--help`` away) that suggests the
    closest flag for a misspelt one (``--schedular``: did you mean --scheduler?)."""

    def error(self, message: str):
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}{self._suggest(message)} (see {self.prog} --help)\n")

    def _suggest(self, message: str) -> str:
        import difflib

        if not message.startswith("unrecognized arguments:"):
            return ""
        known = set(self._option_string_actions)
        for a in self._actions:  # the subcommands' flags (argparse reports their leftovers here)
            if isinstance(a, argparse._SubParsersAction):
                for sp in a.choices.values():
                    known |= set(sp._option_string_actions)
        hints = []
        for word in message.split(":", 1)[1].split():
            flag = word.split("=", 1)[0]
            close = difflib.get_close_matches(flag, sorted(known), n=1, cutoff=0.7) if flag.startswith("-") else []
            if close:
                hints.append((flag, close[0]))
        if len(hints) == 1:
            return f"; did you mean {hints[0][1]}?"
        return "".join(f"; {flag}: did you mean {close}?" for flag, close in hints)


def _version() -> str:
    """The installed package's version (its metadata), as ``pip show servesim`` gives it."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("servesim")
    except PackageNotFoundError:
        return "unknown (not installed; pip install -e .)"


class Interrupted(BaseException):
    """SIGTERM, raised in the main thread so that ``finally`` blocks (worker pools) run."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser; given the command line, only the module of its command registers (every
    module registers for ``--help``, a usage error or an unknown command)."""
    parser = Parser(prog="servesim", description="Simulate LLM inference serving before buying GPUs.")
    parser.add_argument("--version", action="version", version=f"servesim {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    first = next((a for a in argv or () if not a.startswith("-")), None)
    mine = [m for m, names in COMMANDS.items() if first in names]
    for name in mine or COMMANDS:
        importlib.import_module(name).register(sub)
    return parser


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """``ServesimWarning``: one plain line on stderr; other warnings as Python prints them."""
    if issubclass(category, ServesimWarning):
        print(f"servesim: warning: {message}", file=file or sys.stderr)
    else:
        _python_showwarning(message, category, filename, lineno, file, line)


_python_showwarning = warnings.showwarning


RESULT_NAMES = frozenset({
    "summary.json", "config.yaml", "requests.parquet", "steps.parquet", "plots", "runs", "sweep.json", "plan.json",
    "capacity.json", "ab.json", "report.html", "report.md", "stats.json", "comparison.json", "predictions.parquet",
    "results.parquet"})
"""Names servesim writes in an output folder: a folder holding one of them is a servesim result,
which a new command may write over; any other non-empty folder is refused (``check_out``)."""


def check_out(args) -> None:
    """``--out`` must be a folder that can be created, or an existing one that is empty or holds
    servesim results (a run writes over the previous one; any other folder is refused, so that
    a default such as ``results/run`` never writes into someone's files; the calibration
    commands' ``--out`` is a root of ``<hardware>/<model>/`` folders, shared, and exempt).
    Checked before any simulation runs, and creates nothing."""
    out = getattr(args, "out", None)
    if not out:
        return
    p = Path(out)
    for q in (p, *p.parents):
        if q.exists() and not q.is_dir():
            what = "is a file" if q == p else f"lies under {q}, which is a file"
            raise ServesimError(f"--out {out} {what}; give a folder")
    if p.exists():
        if not os.access(p, os.W_OK):
            raise ServesimError(f"--out {out} is not writable")
        names = {n.name for n in p.iterdir() if not n.name.startswith(".")}
        if names and not names & RESULT_NAMES and not getattr(args, "out_is_root", False):
            raise ServesimError(f"--out {out} is a folder that holds other files ({', '.join(sorted(names)[:3])}"
                                f"{', ...' if len(names) > 3 else ''}) and no servesim results; give a new or empty folder")
        return
    _check_creatable(p, out)


def _check_creatable(p: Path, out: str) -> None:
    """Whether the nearest existing folder above ``p`` takes a new folder (tried, then removed:
    write permission bits say nothing to root, or on /proc)."""
    import tempfile

    base = next((q for q in p.absolute().parents if q.exists()), None)
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".servesim-", dir=base))
    except OSError as e:
        raise ServesimError(f"--out {out}: cannot create a folder in {base} ({e.strerror})") from None


def _on_sigterm(signum, frame):
    raise Interrupted(signum)


def main(argv: list[str] | None = None) -> int:
    warnings.showwarning = _show_warning
    try:
        argv = sys.argv[1:] if argv is None else argv
        args = build_parser(argv).parse_args(argv)
    except SystemExit as e:  # --help (0) or a usage error (2, its line already printed)
        return e.code if isinstance(e.code, int) else EXIT_USAGE
    if not getattr(args, "func", None):
        build_parser().print_help()
        return 0
    old = signal.signal(signal.SIGTERM, _on_sigterm) if _main_thread() else None
    try:
        check_out(args)
        return int(args.func(args) or 0)
    except BrokenPipeError:
        _silence_stdout()
        return 0
    except (KeyboardInterrupt, Interrupted) as e:
        print("servesim: interrupted", file=sys.stderr)
        return 128 + e.signum if isinstance(e, Interrupted) else EXIT_INTERRUPTED
    except Exception as e:  # noqa: BLE001 (the boundary: one line, never a traceback)
        if _is_user_error(e):
            _say(f"servesim: error: {_one_line(e)}")
            return EXIT_USAGE
        if os.environ.get("SERVESIM_DEBUG"):
            raise
        _say(f"servesim: internal error: {type(e).__name__}: {_one_line(e)} "
             "(a bug; SERVESIM_DEBUG=1 shows the traceback)")
        return EXIT_BUG
    finally:
        if old is not None:
            signal.signal(signal.SIGTERM, old)


def _is_user_error(e: BaseException) -> bool:
    from sim.catalog import CatalogError

    return isinstance(e, (ServesimError, CatalogError))


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return text if len(text) <= 2000 else text[:2000] + " ..."


def _say(line: str) -> None:
    try:
        print(line, file=sys.stderr)
    except (BrokenPipeError, ValueError):
        pass


def _silence_stdout() -> None:
    """After a closed pipe, point stdout at /dev/null so the interpreter's final flush is quiet."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # stdout replaced (tests) or already closed
        pass


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


if __name__ == "__main__":
    sys.exit(main())
