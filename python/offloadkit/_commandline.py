"""What the Python commands (``python -m offloadkit check``, ``replay``, ``ecosystem``, ...) share:
the exit statuses of bad usage and of an implementation that cannot be loaded, argparse with the
C++ command's wording, a factory's file made absolute, the extension module, and the C++ program
the package hands its other commands to."""

from __future__ import annotations

import argparse
import os
import sys
from typing import NoReturn, Optional

USAGE = 2  # exit status of bad usage, as the C++ command's
UNAVAILABLE = 3  # what the command needs cannot run here (the executor, the offloadkit program)
PLUGIN = 4  # a plugin or Python implementation cannot be loaded or has nothing to run


class _Parser(argparse.ArgumentParser):
    """argparse with the C++ command's wording for the errors argparse finds itself; an unknown
    option is named with the valid ones (those ``--help`` shows)."""

    def error(self, message: str) -> NoReturn:
        if message.startswith("unrecognized arguments: "):
            option = message[len("unrecognized arguments: "):].split()[0]
            valid = ", ".join(a.option_strings[-1] for a in self._actions
                              if a.option_strings and a.help is not argparse.SUPPRESS)
            message = f"{option}: unknown option: valid options are {valid}"
        elif message.startswith("argument ") and message.endswith("expected one argument"):
            # "argument --executor: expected one argument" -> "--executor: needs a value"
            option = message[len("argument "):].split(":", 1)[0].split("/")[-1]
            message = f"{option}: needs a value"
        elif message.startswith("argument ") and "ignored explicit argument" in message:
            option = message[len("argument "):].split(":", 1)[0].split("/")[-1]
            message = f"{option}: takes no value"
        sys.stderr.write(f"{self.prog}: {message}\n({self.prog} --help shows the usage)\n")
        sys.exit(USAGE)


def integer_in(text: str, low: int, high: int) -> int:
    """``text`` as a decimal integer in [low, high], else ValueError in the C++ command's words
    (``<text> is not an integer: valid range low..high``, ``<value> is out of range: valid range
    low..high``); the caller puts the option's name in front."""
    try:
        value = int(text, 10)
    except ValueError:
        raise ValueError(f"{text} is not an integer: valid range {low}..{high}") from None
    if not low <= value <= high:
        raise ValueError(f"{value} is out of range: valid range {low}..{high}")
    return value


def absolute_factory(spec: str) -> str:
    """MODULE:FACTORY with a MODULE given as a file path made absolute (as the C++ command does),
    so that a child process finds it from any folder."""
    module, sep, factory = spec.rpartition(":")
    if sep and (module.endswith(".py") or "/" in module):
        module = os.path.normpath(os.path.abspath(module))
    return f"{module}{sep}{factory}"


def native():
    """The extension module, or exit status 4 with why it cannot be imported."""
    try:
        from . import _native
    except ImportError as e:
        sys.stderr.write(
            f"offloadkit check: the extension module offloadkit._native cannot be imported "
            f"({e}): install offloadkit with `pip install --no-build-isolation .` from its "
            f"checkout, or put a build's python folder (<build>/python) on PYTHONPATH\n")
        sys.exit(PLUGIN)
    return _native


def program_path() -> Optional[str]:
    """The C++ program ``offloadkit`` this package hands its other commands to: the one
    ``OFFLOADKIT_PROGRAM`` names (``none``: no program), else the one the package ships, else the
    build tree's beside the build's python folder. None where there is none."""
    named = os.environ.get("OFFLOADKIT_PROGRAM", "")
    if named:
        return None if named == "none" else named
    here = os.path.dirname(os.path.abspath(__file__))
    for candidate in (os.path.join(here, "bin", "offloadkit"),
                      os.path.join(here, os.pardir, os.pardir, "tools", "offloadkit")):
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return os.path.normpath(candidate)
    return None
