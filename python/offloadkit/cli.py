"""``python -m offloadkit``: the ``check`` command in the user's own interpreter.

``python -m offloadkit check MODULE:FACTORY [options]`` runs offloadkit's property batteries
against the Python implementation that ``MODULE.FACTORY()`` returns, importing ``MODULE`` in this
interpreter (whatever ``python`` can import, offloadkit can check). The batteries, the executors
and the child process per property are offloadkit's C++ ``check`` command, run from the
extension module ``offloadkit._native``; each property's child is ``sys.executable -m offloadkit
check --run-one ...``, so a crash, an ``os._exit`` or a hang is one FAILED row and the run goes
on. Options, output, exit codes and reproduce lines are those of ``offloadkit check``; the C++
command's ``offloadkit check --python`` runs this very command (in the interpreter
``OFFLOADKIT_PYTHON`` names, else ``python3``).

``python -m offloadkit replay FILE... --python MODULE:FACTORY`` replays schedule files through the
paged stash of a Python implementation, as ``offloadkit replay --plugin`` does through a plugin's.

``python -m offloadkit ecosystem [options]`` checks every library ``offloadkit.adapters`` drives
and writes their conformance matrix (``offloadkit.ecosystem``).

One ``offloadkit``: this command (the package's console script, and ``python -m offloadkit``) and
the C++ program ``offloadkit`` take the same commands. What runs in Python runs here: ``check``
and ``replay`` of a Python implementation (MODULE:FACTORY), ``ecosystem``, ``version``. Everything
else (``check`` of offloadkit's own batteries or of a ``--plugin`` library, ``capture``,
``analyze``, ``schedule-gen``, ``conformance``, ``help``, ...) is handed to the program, which
the package ships (``offloadkit/bin/offloadkit``; in a build tree, ``<build>/tools/offloadkit``;
``OFFLOADKIT_PROGRAM=PATH`` names another, ``=none`` none); the program hands ``ecosystem`` and
``check MODULE:FACTORY`` back to Python. Its command table is the one list ``--help`` prints.

argparse reads the command line's shape (the factory, which options take a value, ``--help``);
the values themselves are checked once, by the C++ command, whose messages name the option, the
value and the valid range (``offloadkit check: --cases: 0 is out of range: valid range
1..1000000``, exit status 2).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from typing import List, Optional, Sequence

from ._commandline import (PLUGIN, UNAVAILABLE, USAGE, _Parser, absolute_factory, native,
                           program_path)


# The C++ command's options that take a value, and its flags, as `python -m offloadkit check`
# offers them (--plugin is the C++ command's alone).
VALUE_OPTIONS = {
    "--executor": ("auto|host|cuda", "where to run (default auto: cuda when a GPU is usable)"),
    "--seed": ("N", "seed for every property (default: a fresh one, printed)"),
    "--cases": ("N", "run exactly N cases per property (1..1000000; default: each property's "
                     "own)"),
    "--feature": ("NAME", "only this feature's properties (stash, region, arena, activation)"),
    "--implementation": ("NAME", "only this implementation's properties"),
    "--property": ("NAME", "only the properties with this name"),
    "--free-memory": ("only|without", "only the properties that read the device's free memory "
                                      "(only: they need the GPU to themselves), or only the "
                                      "others (without)"),
    "--timeout": ("SECONDS", "stop a property still running after SECONDS, in 1..86400 "
                             "(default 600)"),
    "--shutdown-grace": ("SECONDS", "how long a property's process may take to exit after its "
                                    "result, in 1..86400; past it, it is killed and recorded as "
                                    "hung at exit (default 30)"),
    "--report": ("FILE", "also write a conformance report into FILE (.md, .json or .html)"),
    "--fault-call": ("N", "with --driver-faults: run case N alone"),
    "--python": ("MODULE:FACTORY", "the factory to check, as the C++ command takes it (the "
                                   "reproduce lines use it)"),
}
FLAGS = {
    "--no-shrink": "report a failing case as found, without shrinking it",
    "--driver-faults": "instead of the batteries, fail the implementation's own N-th CUDA "
                       "allocation or mapping call, N = 0, 1, 2, ... (cuda executor only)",
    "--in-process": "run the properties in this process, one after another (no isolation; "
                    "for a debugger)",
    "--list": "list the selected properties instead of running them",
}

EPILOG = """\
Each property runs in a child process of its own (sys.executable -m offloadkit), so that a crash,
an exit() or a hang in the code under test ends only that property: it is one FAILED row with the
last lines of its output, and the run goes on. Every failure prints the command that replays it.

A process that crashes, exits with an unexpected status or hangs after it wrote its property's
result (at interpreter exit, say) keeps the property's verdict: the way it ended is a shutdown
finding, listed once per feature after the table and in the --report's "shutdown" section.

exit status: 0 every property holds; 1 a property failed, or a shutdown finding; 2 bad usage; 3
the executor cannot run here; 4 the Python implementation cannot be loaded or has nothing to run;
5 the report cannot be written; 128+N interrupted by signal N.
"""


def _check_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="offloadkit check", formatter_class=argparse.RawDescriptionHelpFormatter,
                description="Runs offloadkit's property batteries against the Python "
                            "implementation MODULE.FACTORY() returns, in this interpreter, and "
                            "prints a table of the results.",
                epilog=EPILOG, allow_abbrev=False)
    p.add_argument("factory", nargs="?", metavar="MODULE:FACTORY",
                   help="MODULE: a module this interpreter imports, or a .py file; FACTORY: "
                        "what to call in it for the offloadkit.Plugin to check")
    for name, (metavar, text) in VALUE_OPTIONS.items():
        p.add_argument(name, metavar=metavar, help=text, action="append")
    for name, text in FLAGS.items():
        p.add_argument(name, action="store_true", help=text)
    return p


def program_name() -> str:
    """The start of every reproduce line: this interpreter, as a shell word, and ``-m
    offloadkit``."""
    return f"{shlex.quote(sys.executable)} -m offloadkit"


def _point_at_interposer() -> None:
    """Lets the C++ command find the driver-call interposer shipped inside the package (an
    installed package has no build tree to find it in). A value the user set is kept."""
    if "OFFLOADKIT_INTERPOSE_LIBRARY" in os.environ:
        return
    shipped = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib",
                           "liboffloadkit_interpose.so")
    if os.path.isfile(shipped):
        os.environ["OFFLOADKIT_INTERPOSE_LIBRARY"] = shipped


def run_check(args: Sequence[str]) -> int:
    """Runs the C++ check command with `args` (the options after ``check``, ``--python
    MODULE:FACTORY`` among them) in this process; its children run this interpreter. Returns the
    exit status."""
    _native = native()
    _point_at_interposer()
    sys.stdout.flush()
    sys.stderr.flush()
    return _native.check_main(list(args), program_name(), sys.executable,
                              ["-m", "offloadkit", "check"])


def _asks_help(args: Sequence[str]) -> bool:
    return any(a in ("-h", "--help") for a in args)


def run_program(program: str, args: Sequence[str]) -> int:
    """Becomes the C++ program `program` (program_path()) with `args` (exec), with this
    interpreter as the one it runs Python commands in (unless ``OFFLOADKIT_PYTHON`` names
    another). Returns only where the exec fails: exit status 3."""
    _point_at_interposer()
    os.environ.setdefault("OFFLOADKIT_PYTHON", sys.executable)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execv(program, [program] + list(args))
    except OSError as e:
        sys.stderr.write(f"offloadkit: the offloadkit program {program} cannot be started: "
                         f"{e.strerror}; set OFFLOADKIT_PROGRAM to the program's path\n")
    return UNAVAILABLE


def check(argv: Sequence[str]) -> int:
    """``check``: reads the command line, then runs the batteries. Returns the exit status. A
    check that names no Python factory (MODULE:FACTORY or --python), or names a --plugin library,
    and --help, are the program's where there is one."""
    if "--run-one" in argv:
        # A child the check command started: its arguments are the C++ command's own.
        return run_check(argv)
    program = program_path()
    # --plugin first: argparse, which does not know it, would take its value for the factory.
    plugin = any(a == "--plugin" or a.startswith("--plugin=") for a in argv)
    if program is not None and (_asks_help(argv) or plugin):
        return run_program(program, ["check"] + list(argv))
    parser = _check_parser()
    opts, rest = parser.parse_known_args(list(argv))
    factory: Optional[str] = opts.factory
    if program is not None and factory is None and opts.python is None:
        return run_program(program, ["check"] + list(argv))
    forwarded: List[str] = []
    if opts.python is not None:
        if factory is not None:
            parser.error(f"{factory}: unexpected argument (the factory is given by --python "
                         f"{opts.python[-1]})")
        # The C++ command names a repeated option itself.
        for value in opts.python:
            forwarded += ["--python", value]
    elif factory is None:
        parser.error("MODULE:FACTORY is required (e.g. my_offload:make or ./my_offload.py:make)")
    else:
        forwarded += ["--python", factory]
    for name in VALUE_OPTIONS:
        if name == "--python":
            continue
        for value in getattr(opts, name[2:].replace("-", "_")) or []:
            forwarded.append(f"{name}={value}")
    for name in FLAGS:
        if getattr(opts, name[2:].replace("-", "_")):
            forwarded.append(name)
    # Anything argparse does not know goes to the C++ command, which names it with the valid
    # options ("offloadkit check: --fast: unknown option: valid options are ...").
    return run_check(forwarded + rest)


def list_cases(argv: Sequence[str]) -> int:
    """``list-cases MODULE:FACTORY --executor host|cuda``: the properties the batteries would run
    for the factory, as one JSON object on stdout (what the pytest plugin collects)."""
    p = _Parser(prog="offloadkit list-cases", allow_abbrev=False,
                description="Prints the properties the batteries would run for MODULE:FACTORY "
                            "on an executor, as JSON, without running them.")
    p.add_argument("factory", metavar="MODULE:FACTORY")
    p.add_argument("--executor", choices=["host", "cuda"], required=True)
    opts = p.parse_args(list(argv))
    _native = native()
    try:
        cases, notes = _native.list_cases(absolute_factory(opts.factory), opts.executor)
    except Exception as e:  # the factory's own error, with its traceback text
        sys.stderr.write(f"offloadkit list-cases: {e}\n")
        return PLUGIN
    json.dump({"executor": opts.executor, "cases": cases, "notes": notes,
               "cuda_unavailable": _native.cuda_unavailable_reason()}, sys.stdout)
    sys.stdout.write("\n")
    return 0


def replay(argv: Sequence[str]) -> int:
    """``replay FILE|FOLDER... --python MODULE:FACTORY [options]``: the C++ ``offloadkit replay``
    through the paged stash of the Python factory, in this interpreter. Returns the exit status."""
    args = list(argv)
    program = program_path()
    names_factory = any(a == "--python" or a.startswith("--python=") for a in args)
    if program is not None and not names_factory and not _asks_help(args):
        # through the program's own stashes or a plugin's
        return run_program(program, ["replay"] + args)
    if _asks_help(args):
        sys.stdout.write(
            "usage: python -m offloadkit replay FILE|FOLDER... --python MODULE:FACTORY [options]\n\n"
            "Replays paged-stash schedule files (one per pipeline rank, or folders of them) through\n"
            "the stash of the Python implementation MODULE.FACTORY() returns, in this interpreter,\n"
            "and compares every restored byte. The other options are those of `offloadkit replay`\n"
            "(--executor, --pool-pages, --data-row-bytes, --plan-only, --quiet; `offloadkit replay\n"
            "--help` lists them), --impl and --plugin excepted.\n\n" + EPILOG_REPLAY)
        return 0
    factory: Optional[str] = None
    rest: List[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        name, eq, value = a.partition("=")
        if name == "--python":
            if not eq:
                if i + 1 >= len(args):
                    return _usage("offloadkit replay", "--python: needs a value")
                i += 1
                value = args[i]
            if factory is not None:
                return _usage("offloadkit replay", "--python: given twice")
            factory = value
        elif name in ("--plugin", "--impl"):
            return _usage("offloadkit replay", f"{name}: not offered by python -m offloadkit "
                          f"replay, which replays through the stash of --python MODULE:FACTORY "
                          f"(`offloadkit replay {name} ...` does)")
        else:
            rest.append(a)
        i += 1
    if factory is None:
        return _usage("offloadkit replay", "--python MODULE:FACTORY is required (the Python "
                      "stash to replay through)")
    module, sep, name = factory.rpartition(":")
    if not sep or not module or not name:
        return _usage("offloadkit replay", f"--python: '{factory}' is not MODULE:FACTORY "
                      f"(e.g. my_offload:make or ./my_offload.py:make)")
    _native = native()
    sys.stdout.flush()
    sys.stderr.flush()
    return _native.replay_main(rest, absolute_factory(factory))


EPILOG_REPLAY = """\
exit status: 0 every restored byte matches; 1 restored bytes differ; 2 bad usage; 3 the executor
cannot run here; 4 the Python implementation cannot be loaded or has no stash for the executor;
5 an input file cannot be read or is invalid; 6 a pool overflows.
"""


def _usage(prog: str, message: str) -> int:
    sys.stderr.write(f"{prog}: {message}\n({prog} --help shows the usage)\n")
    return USAGE


# The commands that run here where the program is missing (the program's table lists them too).
COMMANDS = {
    "check": "run the property batteries against a Python implementation (MODULE:FACTORY)",
    "replay": "replay schedule files through the paged stash of a Python implementation",
    "ecosystem": "check the libraries offloadkit.adapters drives and write their conformance "
                 "matrix",
    "version": "print the version and whether the cuda back end is usable here",
}


def _own_help(args: Sequence[str]) -> int:
    """``--help`` where there is no program: the commands that run here, and why the others do
    not."""
    names = ", ".join(COMMANDS)
    if not args:
        sys.stderr.write(f"offloadkit: no command given: valid commands are {names}\n")
    out = sys.stdout if args else sys.stderr
    out.write("usage: python -m offloadkit <command> [options]\n\ncommands:\n")
    for name, text in COMMANDS.items():
        out.write(f"  {name:<10} {text}\n")
    out.write("\nEvery command prints its own options with --help (python -m offloadkit check "
              "--help).\nThe offloadkit program's commands (capture, analyze, schedule-gen, "
              "conformance, check of\na plugin library, ...) need the program, which this "
              "package does not find: see\nOFFLOADKIT_PROGRAM in `pydoc offloadkit.cli`.\n")
    return 0 if args else USAGE


def main(argv: Optional[Sequence[str]] = None) -> int:
    """The ``offloadkit`` console script and ``python -m offloadkit``. Returns the exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    program = program_path()
    if not args or args[0] in ("-h", "--help", "help"):
        return run_program(program, args) if program is not None else _own_help(args)
    command, rest = args[0], args[1:]
    if command == "check":
        return check(rest)
    if command == "list-cases":
        return list_cases(rest)
    if command == "replay":
        return replay(rest)
    if command == "ecosystem":
        from . import ecosystem

        return ecosystem.main(rest)
    if command == "plugin-info":  # what `ecosystem` asks of a factory, in a child process
        from . import ecosystem

        return ecosystem.plugin_info(rest)
    if command in ("version", "--version"):
        if _asks_help(rest) and program is not None:
            return run_program(program, args)
        _native = native()
        reason = _native.cuda_unavailable_reason()
        print(f"offloadkit {_native.version} (extension module {_native.module_path()})")
        print("cuda back end: " + ("usable" if not reason else f"unavailable ({reason})"))
        print(f"program: {program or 'none (see OFFLOADKIT_PROGRAM)'}")
        return 0
    if program is not None:
        # The program's command, or its message for an unknown one.
        return run_program(program, args)
    names = ", ".join(COMMANDS)
    sys.stderr.write(f"offloadkit: {command}: unknown command here: valid commands are {names} "
                     f"(the offloadkit program, not found, has more)\n")
    return USAGE
