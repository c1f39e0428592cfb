"""``python -m offloadkit ecosystem``: the conformance matrix of the ecosystem's offload libraries,
from the libraries installed in this interpreter, in one command.

For each adapter of ``offloadkit.adapters.ADAPTERS`` (those ``--only`` names, each factory as
``--factory`` replaces it), in child processes of this interpreter:

1. ``python -m offloadkit plugin-info FACTORY`` loads the factory once: the plugin's name and the
   library's version, or why it cannot be loaded;
2. ``python -m offloadkit check FACTORY --executor E --report DIR/NAME.json`` runs the batteries
   (its output in ``DIR/NAME.log``); with ``--driver-faults``, ``... --driver-faults --report
   DIR/NAME-faults.json`` too. With ``--jobs`` above 1, a library's batteries are checked in
   parts: a battery runs its properties one after another, and one library's would otherwise be
   the whole run's length. The properties that read the device's free memory (``list-cases``
   says which) are one check per library (``... --free-memory only --report
   DIR/NAME.free-memory.json``), and these checks run first, one at a time with nothing else
   running, since another check's allocations would move what they read; every other property
   is a check of its own (``... --property P --report DIR/NAME.P.json``), and these and the
   driver-fault countdowns then run side by side.

A library that does not import here (the adapter's ``LibraryMissing``: the check ends with exit
status 4), that the adapter refuses here (``Unsupported``: a build without the part it drives), or
whose adapter has nothing to run on the executor is *not run here*: its column of the matrix says
so, with the reason, and that is never a failure.

Then ``DIR/conformance.json``, the description ``offloadkit conformance`` reads (per library: the
version, the factory, what the adapter adds, the reports, and the library's classifications from
``--classified FILE``; a classification of a property skipped here, or of driver faults this run
did not check, is left out with a note in the library's row), and last ``offloadkit conformance
DIR/conformance.json -o DIR/CONFORMANCE.md``, run with offloadkit's C++ command: ``--offloadkit
PATH``, else the one ``OFFLOADKIT`` names, else ``offloadkit`` on ``PATH``.

The classifications file (``offloadkit/adapters/classified.json`` by default)::

    {"format": "offloadkit.classified", "format_version": 1,
     "libraries": {"NAME": [{"property": "feature/property", "class": "defect|limitation",
                             "evidence": "...", "upstream": "owner/repo#N",
                             "reproducer": "python3 reproducers/NAME.py",
                             "intermittent": false}]}}

``intermittent``: a defect that is a race, shown in some runs and not in others; a run in which
its property holds does not make the classification stale.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import dataclasses
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import time
from typing import Any, Callable, Dict, List, NoReturn, Optional, Sequence, Tuple, TypeVar

from . import adapters
from ._commandline import USAGE, _Parser as Parser, absolute_factory, integer_in, native, program_path

PROG = "offloadkit ecosystem"
COMPLETE = 0
UNCLASSIFIED = 1  # as `offloadkit conformance`: a failure unclassified or a classification stale
CANNOT_RUN = 3
ADAPTER_ERROR = 4
FILE_ERROR = 5
#: When several apply, the exit status is the first of these.
PRECEDENCE = (FILE_ERROR, ADAPTER_ERROR, CANNOT_RUN, UNCLASSIFIED)

CLASSIFIED_FORMAT = "offloadkit.classified"
CLASSIFIED_KEYS = ("property", "class", "evidence", "upstream", "reproducer", "intermittent")
CLASSES = ("defect", "limitation")
DEFAULT_CLASSIFIED = os.path.join(os.path.dirname(os.path.abspath(adapters.__file__)),
                                  "classified.json")
DEFAULT_OUT = "offloadkit-ecosystem"
EXECUTORS = ("auto", "host", "cuda")
TITLE = "The ecosystem's offload libraries"

EPILOG = """\
libraries (offloadkit.adapters.ADAPTERS):
{table}

A library that does not import here, or that its adapter refuses here, is "not run here" in the
matrix, with the reason: never a failure. The checks' output is in DIR/NAME.log.

exit status: 0 the matrix is complete (every failure classified); 1 it was written, but a failure
is unclassified or a classification is stale; 2 bad usage; 3 cannot run here: --executor cuda
without a usable GPU, or offloadkit's C++ command not found (nothing runs), or a check's executor
cannot run; 4 an adapter cannot be loaded for another reason than its library, or a check ended
without a verdict (its column says why; the matrix is written); 5 a file cannot be read or
written (the classifications, DIR, a report offloadkit conformance refuses); 128+N interrupted by
signal N. Where several apply: 5, 4, 3, then 1.
"""


def parser() -> Parser:
    table = "\n".join(f"  {a.name:<26} {a.feature:<10} {a.factory}" for a in adapters.ADAPTERS)
    p = Parser(prog=PROG, formatter_class=argparse.RawDescriptionHelpFormatter,
               allow_abbrev=False, epilog=EPILOG.format(table=table),
               description="Checks every library offloadkit.adapters drives, as installed in "
                           "this interpreter, and writes their conformance matrix "
                           "(DIR/CONFORMANCE.md) with offloadkit's C++ `conformance` command.")
    p.add_argument("--executor", metavar="NAME", default="auto",
                   help="auto, host or cuda (default auto: cuda where a GPU is usable)")
    p.add_argument("--out", metavar="DIR", default=DEFAULT_OUT,
                   help=f"where the reports, logs, conformance.json and CONFORMANCE.md are "
                        f"written (default ./{DEFAULT_OUT})")
    p.add_argument("--classified", metavar="FILE", default=DEFAULT_CLASSIFIED,
                   help="the classifications of the libraries' failures (default: the "
                        "package's offloadkit/adapters/classified.json)")
    p.add_argument("--offloadkit", metavar="PATH",
                   help="offloadkit's C++ command (default: OFFLOADKIT, else offloadkit on PATH)")
    p.add_argument("--cases", metavar="N", help="cases per property, 1..1000000 (default: each "
                                                "property's own; not for the driver-fault "
                                                "countdown, which runs N = 0, 1, 2, ... until a "
                                                "case reaches no call N)")
    p.add_argument("--timeout", metavar="SECONDS",
                   help="a property's time limit, 1..86400 (default: the check's, 600)")
    p.add_argument("--jobs", metavar="N", default="1",
                   help="checks run at once, 1..64 (default 1): each library's batteries and "
                        "its driver-fault countdown are checks of their own, each in processes "
                        "of its own; above 1, the properties that read the device's free memory "
                        "are one check per library (DIR/NAME.free-memory.json), run first, one "
                        "at a time with nothing else running, then every other property "
                        "(DIR/NAME.PROPERTY.json) and the driver-fault countdowns side by side")
    p.add_argument("--only", metavar="NAME", action="append",
                   help="only this library (repeatable)")
    p.add_argument("--factory", metavar="NAME=MODULE:FACTORY", action="append",
                   help="drive library NAME through this factory instead of its adapter's "
                        "(repeatable)")
    p.add_argument("--driver-faults", action="store_true",
                   help="also each library's driver-fault table (cuda executor only), in "
                        "DIR/NAME-faults.json")
    return p


def _integer(text: Optional[str], option: str, low: int, high: int, p: Parser) -> Optional[int]:
    if text is None:
        return None
    try:
        return integer_in(text, low, high)
    except ValueError as e:
        p.error(f"{option}: {e}")


def check_values(p: Parser, o: argparse.Namespace) -> None:
    """Reads every value, refusing a bad one with the option, the value and what is valid."""
    names = [a.name for a in adapters.ADAPTERS]
    if o.executor not in EXECUTORS:
        p.error(f"--executor: {o.executor} is not one of the valid values {', '.join(EXECUTORS)}")
    o.cases = _integer(o.cases, "--cases", 1, 1000000, p)
    o.timeout = _integer(o.timeout, "--timeout", 1, 86400, p)
    o.jobs = _integer(o.jobs, "--jobs", 1, 64, p)
    for name in o.only or []:
        if name not in names:
            p.error(f"--only: {name} is not one of the valid names {', '.join(names)}")
    factories: Dict[str, str] = {}
    for value in o.factory or []:
        name, eq, factory = value.partition("=")
        module, colon, function = factory.rpartition(":")
        if not eq or not colon or not module or not function:
            p.error(f"--factory: '{value}' is not NAME=MODULE:FACTORY (e.g. "
                    f"vllm=./my_vllm.py:make)")
        if name not in names:
            p.error(f"--factory: {name} is not one of the valid names {', '.join(names)}")
        if name in factories:
            p.error(f"--factory: {name} is given twice")
        factories[name] = absolute_factory(factory)
    o.factory = factories
    if o.driver_faults and o.executor == "host":
        p.error("--driver-faults: needs the cuda executor (--executor cuda, or auto on a machine "
                "with a usable GPU), not --executor host")


def progress(text: str) -> None:
    sys.stderr.write(f"{PROG}: {text}\n")
    sys.stderr.flush()


class Stop(Exception):
    """Ends the run before the matrix: the message and the exit status."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status


# ---- offloadkit's C++ command -----------------------------------------------------------------


def find_offloadkit(option: Optional[str], environ: Dict[str, str]) -> str:
    """The C++ command: --offloadkit, else OFFLOADKIT (a path or a name on PATH), else the program
    the package ships (offloadkit/bin/offloadkit), else offloadkit on PATH. Stop (exit status 3)
    where there is none, or where it has no `conformance` (a console script that finds no
    program)."""
    shipped = program_path()
    if option:
        where, value = "--offloadkit", option
    elif environ.get("OFFLOADKIT"):
        where, value = "OFFLOADKIT", environ["OFFLOADKIT"]
    elif shipped is not None:
        where, value = "the package's program", shipped
    else:
        where, value = "PATH", "offloadkit"
    path = value if os.sep in value else shutil.which(value, path=environ.get("PATH"))
    if path is None or not (os.path.isfile(path) and os.access(path, os.X_OK)):
        raise Stop(f"offloadkit's C++ command not found ({where}: {value}"
                   f"{'' if os.sep in value else ' is not on PATH'}): name it with --offloadkit "
                   f"PATH or OFFLOADKIT=PATH (a build's tools/offloadkit, or the installed one)",
                   CANNOT_RUN)
    try:
        probe = subprocess.run([path, "conformance", "--help"], capture_output=True, text=True,
                               timeout=60)
        is_cxx = probe.returncode == 0 and "offloadkit.conformance" in probe.stdout
    except (OSError, subprocess.TimeoutExpired):
        is_cxx = False
    if not is_cxx:
        raise Stop(f"{path} ({where}) is not offloadkit's C++ command: its `conformance --help` "
                   f"does not describe the conformance matrix (a console script that finds no "
                   f"offloadkit program has no conformance command): name the C++ command with "
                   f"--offloadkit PATH or OFFLOADKIT=PATH", CANNOT_RUN)
    return path


def resolve_executor(requested: str, cuda_unavailable: str) -> Tuple[str, str]:
    """The executor every check runs on, and why; Stop (3) for cuda where it cannot run."""
    if requested == "host":
        return "host", "asked for with --executor host"
    if requested == "cuda":
        if cuda_unavailable:
            raise Stop(f"--executor cuda: the cuda executor cannot run here ({cuda_unavailable})",
                       CANNOT_RUN)
        return "cuda", "asked for with --executor cuda"
    if cuda_unavailable:
        return "host", f"auto: no usable GPU ({cuda_unavailable})"
    return "cuda", "auto: a GPU is usable"


# ---- the classifications ----------------------------------------------------------------------


def read_classified(path: str, names: Sequence[str]) -> Dict[str, List[Dict[str, Any]]]:
    """The classifications file, by library name; Stop (5) naming the file and the JSON pointer
    where it is not one."""
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except OSError as e:
        raise Stop(f"--classified: {path}: cannot be read: {e.strerror}", FILE_ERROR) from e
    except ValueError as e:
        raise Stop(f"--classified: {path}: not valid JSON: {e}", FILE_ERROR) from e

    def fail(at: str, why: str) -> NoReturn:
        raise Stop(f"--classified: {path}: at {at or '/'}: {why}", FILE_ERROR)

    if not isinstance(doc, dict):
        fail("", "must be an object")
    for key in doc:
        if key not in ("format", "format_version", "libraries"):
            fail(f"/{key}", "is not a known key: valid keys are format, format_version, "
                            "libraries")
    if doc.get("format") != CLASSIFIED_FORMAT:
        fail("/format", f"must be \"{CLASSIFIED_FORMAT}\"")
    if doc.get("format_version") != 1:
        fail("/format_version", "must be 1")
    libraries = doc.get("libraries", {})
    if not isinstance(libraries, dict):
        fail("/libraries", "must be an object of library names")
    out: Dict[str, List[Dict[str, Any]]] = {}
    for name, entries in libraries.items():
        at = f"/libraries/{name}"
        if name not in names:
            fail(at, f"{name} is not one of the adapters' names {', '.join(names)}")
        if not isinstance(entries, list):
            fail(at, "must be an array of classifications")
        seen = set()
        for i, entry in enumerate(entries):
            here = f"{at}/{i}"
            if not isinstance(entry, dict):
                fail(here, "must be an object")
            for key in entry:
                if key not in CLASSIFIED_KEYS:
                    fail(f"{here}/{key}", "is not a known key: valid keys are "
                                          f"{', '.join(CLASSIFIED_KEYS)}")
            for key in ("property", "class", "evidence"):
                if not isinstance(entry.get(key), str) or not entry[key]:
                    fail(here, f"needs the key \"{key}\" (a string that is not empty)")
            if "/" not in entry["property"]:
                fail(f"{here}/property", f"'{entry['property']}' is not feature/property")
            if entry["class"] not in CLASSES:
                fail(f"{here}/class", f"'{entry['class']}' is not one of the valid classes "
                                      f"{', '.join(CLASSES)}")
            if not isinstance(entry.get("intermittent", False), bool):
                fail(f"{here}/intermittent", "must be true or false")
            if entry.get("intermittent") and entry["class"] != "defect":
                fail(f"{here}/intermittent", "only a defect is intermittent (a race that shows "
                                             "in some runs)")
            if entry["property"] in seen:
                fail(f"{here}/property", f"'{entry['property']}' is classified twice")
            seen.add(entry["property"])
        out[name] = entries
    return out


# ---- one library ------------------------------------------------------------------------------


@dataclasses.dataclass
class Outcome:
    """What the run of one library gave: its reports, or why it was not run here."""

    name: str
    factory: str
    adds: str
    version: str = ""
    reports: List[str] = dataclasses.field(default_factory=list)  # file names in DIR
    not_run: str = ""
    notes: List[str] = dataclasses.field(default_factory=list)
    status: int = COMPLETE  # what this library adds to the exit status: 0, 3, 4 or 5
    summary: str = ""


def last_message(output: str, prefix: str = "offloadkit check: ") -> str:
    """The last line the check wrote about itself (``offloadkit check: ...``), else its last
    line."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    for line in reversed(lines):
        at = line.find(prefix)
        if at >= 0:
            return line[at + len(prefix):]
    return lines[-1] if lines else "(no output)"


def ended(rc: int) -> str:
    return f"was killed by signal {-rc}" if rc < 0 else f"ended with exit status {rc}"


def verdict_of_check(rc: int, probe: Dict[str, Any], report_written: bool,
                     output: str) -> Tuple[str, int]:
    """How a check's end reads: ("", 0) a report to put in the matrix, else (why the library is
    not run here, the exit status it adds). ``probe`` is what plugin-info said of the factory."""
    if rc in (0, 1):  # every property ran: 1 is a property that does not hold
        if report_written:
            return "", COMPLETE
        return (f"the check {ended(rc)} but wrote no report: "
                f"{last_message(output)}"), ADAPTER_ERROR
    if rc == 4:  # the factory cannot be loaded, or has nothing to run on this executor
        if not probe.get("ok"):
            if probe.get("here"):
                return probe["message"], COMPLETE
            return (f"the adapter cannot be loaded: {probe.get('error', '?')}: "
                    f"{probe.get('message', '')}"), ADAPTER_ERROR
        return last_message(output), COMPLETE
    if rc == 3:
        return f"the executor cannot run here: {last_message(output)}", CANNOT_RUN
    return f"the check {ended(rc)} without a verdict: {last_message(output)}", ADAPTER_ERROR


def run_logged(command: List[str], log_path: str) -> Tuple[int, str]:
    """Runs a child with its output into log_path; (its exit status, its output)."""
    with open(log_path, "w", encoding="utf-8") as log:
        log.write("$ " + " ".join(command) + "\n")
        log.flush()
        rc = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT).returncode
    with open(log_path, encoding="utf-8", errors="replace") as log:
        return rc, log.read()


def probe_factory(factory: str) -> Dict[str, Any]:
    """plugin-info of the factory, in a child process of this interpreter."""
    done = subprocess.run([sys.executable, "-m", "offloadkit", "plugin-info", factory],
                          capture_output=True, text=True)
    try:
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"ok": False, "here": False, "error": f"plugin-info {ended(done.returncode)}",
                "message": last_message(done.stdout + done.stderr, prefix="\0")}


def report_summary(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return ""
    if doc.get("kind") == "driver_faults":
        return "driver faults: " + ", ".join(
            f"{f.get('feature')} {f.get('counts', {})}" for f in doc.get("features", []))
    return str(doc.get("summary", {}).get("text", ""))


def check_command(factory: str, o: argparse.Namespace, executor: str, extra: Sequence[str],
                  report: str) -> List[str]:
    """The check's command line: the batteries' (``extra`` empty) or the driver-fault countdown's
    (``extra`` ``--driver-faults``). The countdown has no cases per property (it runs N = 0, 1,
    2, ... until a case reaches no call N) and refuses --cases: only the properties get it."""
    command = [sys.executable, "-m", "offloadkit", "check", factory, "--executor", executor]
    if o.cases is not None and "--driver-faults" not in extra:
        command.append(f"--cases={o.cases}")
    if o.timeout is not None:
        command.append(f"--timeout={o.timeout}")
    return command + list(extra) + ["--report", report]


def prepare_library(adapter: adapters.Adapter, factory: str,
                    o: argparse.Namespace, out: str) -> Tuple[Outcome, Dict[str, Any]]:
    """Removes the library's reports of an earlier run (never read as this run's) and asks
    plugin-info for the factory's name and version: (the outcome to fill, what the probe said)."""
    outcome = Outcome(adapter.name, factory, adapter.adds)
    if factory != adapter.factory:
        outcome.notes.append(f"factory given with --factory (the adapter's: {adapter.factory})")
    stems = [adapter.name + suffix for suffix, _ in library_runs(o)]
    parts = [n[:-len(".json")] for n in os.listdir(out)
             if n.startswith(adapter.name + ".") and n.endswith(".json")]
    for stem in stems + parts:
        for ext in (".json", ".log"):
            path = os.path.join(out, stem + ext)
            if os.path.lexists(path):
                os.remove(path)
    probe = probe_factory(factory)
    if probe.get("ok"):
        outcome.version = probe.get("version") or ""
    else:
        try:
            outcome.version = importlib.metadata.version(adapter.distribution)
        except importlib.metadata.PackageNotFoundError:
            pass
    return outcome, probe


def battery_properties(factory: str, executor: str) -> List[Tuple[str, bool]]:
    """(name, whether it reads the device's free memory) of each property the factory's batteries
    hold on ``executor``, from ``python -m offloadkit list-cases`` in a child process; empty where
    they cannot be listed (the batteries' check, run whole, then says why). A listing that does
    not say whether a property reads free memory is taken to say it does (it then runs alone)."""
    done = subprocess.run([sys.executable, "-m", "offloadkit", "list-cases", factory,
                           "--executor", executor], capture_output=True, text=True)
    try:
        cases = json.loads(done.stdout.strip().splitlines()[-1])["cases"]
        return [(str(c["name"]), bool(c.get("reads_free_memory", True))) for c in cases]
    except (ValueError, IndexError, KeyError, TypeError, AttributeError):
        return []


def library_runs(o: argparse.Namespace) -> List[Tuple[str, List[str]]]:
    """(report suffix, extra arguments) of each check a library gets: its batteries, then with
    --driver-faults its driver-fault countdown."""
    runs: List[Tuple[str, List[str]]] = [("", [])]
    if o.driver_faults:
        runs.append(("-faults", ["--driver-faults"]))
    return runs


@dataclasses.dataclass
class Run:
    """One check of one library: its batteries (suffix ""), one property of them (``prop``), those
    of them that read the device's free memory (``readers``), or its driver-fault countdown."""

    index: int  # the library's place in the table, from 1
    adapter: adapters.Adapter
    factory: str
    suffix: str
    extra: List[str]
    probe: Dict[str, Any]
    prop: str = ""  # one property of the batteries; empty: all of them (or the readers)
    readers: bool = False  # the properties that read the device's free memory
    why: str = ""  # empty: the report was written
    status: int = COMPLETE
    summary: str = ""

    @property
    def name(self) -> str:
        """The check's name: NAME, NAME.PROPERTY, NAME.free-memory or NAME-faults (its report's
        and log's stem)."""
        part = ".free-memory" if self.readers else f".{self.prop}" if self.prop else ""
        return self.adapter.name + self.suffix + part

    @property
    def report(self) -> str:
        return self.name + ".json"

    @property
    def alone(self) -> bool:
        """The properties that read the device's free memory, or a whole battery of a feature
        that has such properties, run with nothing else running (one property of the others does
        not; nor does the driver-fault countdown, judged by the interposer's ledger)."""
        if self.suffix or self.prop:
            return False
        return self.readers or alone(self.adapter)


def check_run(run: Run, o: argparse.Namespace, executor: str, out: str) -> Run:
    """Runs one check into out/NAME.json (NAME.PROPERTY.json, NAME.free-memory.json,
    NAME-faults.json), its output into the .log of the same name."""
    log = os.path.join(out, run.name + ".log")
    extra = run.extra + ([f"--property={run.prop}"] if run.prop else []) + (
        ["--free-memory=only"] if run.readers else [])
    command = check_command(run.factory, o, executor, extra, os.path.join(out, run.report))
    started = time.monotonic()
    rc, output = run_logged(command, log)
    run.why, run.status = verdict_of_check(rc, run.probe,
                                           os.path.isfile(os.path.join(out, run.report)), output)
    took = f"{time.monotonic() - started:.0f} s"
    name = run.name
    if not run.why:
        run.summary = report_summary(os.path.join(out, run.report))
        note = (f"  {name}: {run.summary or 'report written'} ({took}; exit {rc}; "
                f"{os.path.join(out, run.report)})")
    elif not run.suffix:
        note = f"  {name}: not run here: {run.why} ({took}; exit {rc}; {log})"
    else:
        note = f"  {name}: not checked: {run.why} ({took}; exit {rc}; {log})"
    progress(note)
    return run


def start_order(runs: Sequence[Run]) -> List[Run]:
    """The order the checks start in: the driver-fault countdowns (each one check of many
    processes, the longest side by side) before the batteries, each group in the table's order, so
    that the longest do not start last. What reads the device's free memory runs alone before
    either (``schedule``)."""
    return sorted(runs, key=lambda r: not r.suffix)


def merge_runs(outcome: Outcome, runs: Sequence[Run], out: str) -> Outcome:
    """The library's outcome from its runs, batteries first: a library whose batteries (any
    property of them) did not run is not run here (its driver-fault run, if any, is not read)."""
    for run in runs:
        if not run.why:
            outcome.reports.append(run.report)
            outcome.summary = outcome.summary or run.summary
        elif not run.suffix:
            outcome.reports.clear()
            outcome.not_run, outcome.status = run.why, run.status
            break
        else:
            outcome.notes.append(f"driver faults not checked: {run.why}")
            outcome.status = max(outcome.status, run.status)
    parts = [r.report for r in runs if r.prop or r.readers]
    if parts and not outcome.not_run:
        outcome.summary = battery_summary([os.path.join(out, p) for p in parts])
    return outcome


def battery_summary(reports: Sequence[str]) -> str:
    """The batteries' summary over the reports of their parts (one property, or the properties
    that read free memory, each part a check of its own), in the words of a whole battery's
    report."""
    total: Dict[str, float] = collections.Counter()
    for path in reports:
        try:
            with open(path, encoding="utf-8") as f:
                summary = json.load(f).get("summary", {})
        except (OSError, ValueError):
            continue
        for key in ("holds", "fails", "not_applicable", "skipped", "properties",
                    "shutdown_findings"):
            total[key] += int(summary.get(key, 0))
        total["seconds"] = max(total["seconds"], float(summary.get("seconds", 0)))
    text = (f"{total['holds']} hold, {total['fails']} fail, {total['not_applicable']} not "
            f"applicable, {total['skipped']} skipped ({total['properties']} properties in "
            f"{len(reports)} checks, the longest {total['seconds']:.0f} s)")
    if total["shutdown_findings"]:
        text += f"; {total['shutdown_findings']} shutdown findings"
    return text


# ---- the description --------------------------------------------------------------------------


def verdicts(out: str, reports: Sequence[str]) -> Dict[str, Tuple[str, str]]:
    """feature/property -> (verdict, reason) from a library's reports (a driver-fault report
    gives feature/driver_faults)."""
    found: Dict[str, Tuple[str, str]] = {}
    for report in reports:
        try:
            with open(os.path.join(out, report), encoding="utf-8") as f:
                doc = json.load(f)
        except (OSError, ValueError):
            continue  # offloadkit conformance refuses it, naming why
        if doc.get("kind") == "driver_faults":
            for f in doc.get("features", []):
                found[f"{f.get('feature')}/driver_faults"] = ("checked", "")
        for row in doc.get("properties", []):
            found[f"{row.get('feature')}/{row.get('property')}"] = (
                str(row.get("verdict")), str(row.get("reason") or ""))
    return found


def applicable(outcome: Outcome, entries: Sequence[Dict[str, Any]], out: str,
               driver_faults: bool) -> List[Dict[str, Any]]:
    """The classifications the matrix can judge in this run: not those of a property skipped
    here, nor of driver faults this run did not check (each left out with a note)."""
    seen = verdicts(out, outcome.reports)
    kept = []
    for entry in entries:
        prop = entry["property"]
        verdict, reason = seen.get(prop, ("", ""))
        if prop.endswith("/driver_faults") and prop not in seen and not (
                driver_faults and any(r.endswith("-faults.json") for r in outcome.reports)):
            outcome.notes.append(f"the classification of {prop} not applied: driver faults "
                                 "were not checked in this run")
        elif verdict == "skipped":
            outcome.notes.append(f"the classification of {prop} not applied: skipped here "
                                 f"({reason})")
        else:
            kept.append(entry)
    return kept


def description(outcomes: Sequence[Outcome], classified: Dict[str, List[Dict[str, Any]]],
                out: str, driver_faults: bool) -> Dict[str, Any]:
    """The document `offloadkit conformance` reads (format offloadkit.conformance, 1)."""
    libraries = []
    for o in outcomes:
        lib: Dict[str, Any] = {"name": o.name}
        if o.version:
            lib["version"] = o.version
        lib["adapter"] = o.factory
        if o.not_run:
            lib["not_run"] = o.not_run
        else:
            lib.setdefault("version", "unknown")
            lib["reports"] = list(o.reports)
            kept = applicable(o, classified.get(o.name, []), out, driver_faults)
            if kept:
                lib["classified"] = kept
        lib["notes"] = "; ".join([o.adds] + o.notes)
        libraries.append(lib)
    return {"format": "offloadkit.conformance", "format_version": 1, "title": TITLE,
            "libraries": libraries}


def exit_status(statuses: Sequence[int]) -> int:
    for status in PRECEDENCE:
        if status in statuses:
            return status
    return COMPLETE


# ---- the command ------------------------------------------------------------------------------


#: Features whose batteries read the device's free memory (a region's release is judged by the
#: driver's count: ``release_is_real``, ``many_cycles``), which another process's CUDA context or
#: allocations would move: a whole battery of a library of such a feature (checked whole: with
#: ``--jobs 1``, or where its properties cannot be listed) runs with nothing else running (its
#: driver-fault countdown, judged by the interposer's ledger, runs with the others). Checked one
#: property at a time, only the properties that read free memory run alone.
ALONE_FEATURES = ("region",)


def alone(adapter: adapters.Adapter) -> bool:
    """The adapter's batteries run with nothing else running (``ALONE_FEATURES``)."""
    return adapter.feature in ALONE_FEATURES


T = TypeVar("T")
R = TypeVar("R")


def schedule(tasks: Sequence[T], alone: Callable[[T], bool], one: Callable[[T], R],
             jobs: int) -> List[R]:
    """Runs ``one(task)`` for every task, ``jobs`` at once: first those that must run ``alone``,
    one at a time with nothing else running, in their order, then the others side by side (each
    check is a child process of its own, so libraries do not meet each other's process-global
    state). The results keep the tasks' order."""
    results: Dict[int, R] = {}
    for i, task in enumerate(tasks):
        if alone(task):
            results[i] = one(task)
    rest = [(i, t) for i, t in enumerate(tasks) if not alone(t)]
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        for (i, _), result in zip(rest, pool.map(lambda e: one(e[1]), rest)):
            results[i] = result
    return [results[i] for i in range(len(tasks))]


def run(o: argparse.Namespace) -> int:
    selected = [a for a in adapters.ADAPTERS if not o.only or a.name in o.only]
    offloadkit = find_offloadkit(o.offloadkit, dict(os.environ))
    classified = read_classified(o.classified, [a.name for a in adapters.ADAPTERS])
    executor, why = resolve_executor(o.executor, native().cuda_unavailable_reason())
    if o.driver_faults and executor != "cuda":
        progress(f"note: --driver-faults needs the cuda executor; {why}: driver faults are not "
                 "checked")
        o.driver_faults = False
    out = os.path.abspath(o.out)
    try:
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, "conformance.json"), "w", encoding="utf-8"):
            pass
    except OSError as e:
        raise Stop(f"--out: {o.out}: cannot be written: {e.strerror}", FILE_ERROR) from e
    progress(f"{len(selected)} libraries on the {executor} executor ({why}); classifications "
             f"{o.classified}; offloadkit {offloadkit}; into {out}")
    factories = [o.factory.get(a.name, a.factory) for a in selected]
    factory_of = {a.name: f for a, f in zip(selected, factories)}
    with concurrent.futures.ThreadPoolExecutor(max_workers=o.jobs) as pool:
        prepared = list(pool.map(lambda e: prepare_library(e[0], e[1], o, out),
                                 zip(selected, factories)))
    # Side by side, a battery's properties each in a check of its own (where they can be listed).
    split = [a.name for a, (_, probe) in zip(selected, prepared)
             if o.jobs > 1 and probe.get("ok")]
    with concurrent.futures.ThreadPoolExecutor(max_workers=o.jobs) as pool:
        listed = dict(zip(split, pool.map(
            lambda n: battery_properties(factory_of[n], executor), split)))
    runs: List[Run] = []
    for i, (adapter, factory, (_, probe)) in enumerate(zip(selected, factories, prepared), 1):
        progress(f"[{i}/{len(selected)}] {adapter.name}: {factory}")
        for suffix, extra in library_runs(o):
            # Where the factory does not load, the batteries' check says why; a countdown
            # would say the same again.
            if not suffix and listed.get(adapter.name):
                cases = listed[adapter.name]
                if any(reads for _, reads in cases):
                    runs.append(Run(i, adapter, factory, suffix, extra, probe, readers=True))
                runs += [Run(i, adapter, factory, suffix, extra, probe, prop=p)
                         for p, reads in cases if not reads]
            elif not suffix or probe.get("ok"):
                runs.append(Run(i, adapter, factory, suffix, extra, probe))
    schedule(start_order(runs), lambda r: r.alone, lambda r: check_run(r, o, executor, out),
             o.jobs)
    outcomes = [merge_runs(outcome, [r for r in runs if r.index == i], out)
                for i, (outcome, _) in enumerate(prepared, 1)]

    doc = description(outcomes, classified, out, o.driver_faults)
    description_path = os.path.join(out, "conformance.json")
    matrix = os.path.join(out, "CONFORMANCE.md")
    try:
        with open(description_path, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=2)
            f.write("\n")
    except OSError as e:
        raise Stop(f"{description_path}: cannot be written: {e.strerror}", FILE_ERROR) from e
    if os.path.lexists(matrix):
        os.remove(matrix)
    progress(f"the matrix: {offloadkit} conformance conformance.json -o CONFORMANCE.md, in {out}")
    # Run in DIR, so that the matrix names its reports relative to it (a matrix that is copied
    # elsewhere names no folder of this machine).
    done = subprocess.run([offloadkit, "conformance", "conformance.json", "-o", "CONFORMANCE.md"],
                          capture_output=True, text=True, cwd=out)
    sys.stdout.write(done.stdout)
    sys.stderr.write(done.stderr)
    statuses = [outcome.status for outcome in outcomes]
    if done.returncode in (COMPLETE, UNCLASSIFIED):
        statuses.append(done.returncode)
    else:
        progress(f"offloadkit conformance {ended(done.returncode)}: the matrix is not written")
        statuses.append(FILE_ERROR)
    for outcome in outcomes:
        state = f"not run here: {outcome.not_run}" if outcome.not_run else outcome.summary
        print(f"{outcome.name}: {state}")
    return exit_status(statuses)


def main(argv: Sequence[str]) -> int:
    """``python -m offloadkit ecosystem [options]``. Returns the exit status."""
    p = parser()
    o = p.parse_args(list(argv))
    check_values(p, o)
    try:
        return run(o)
    except Stop as e:
        sys.stderr.write(f"{PROG}: {e}\n")
        return e.status
    except KeyboardInterrupt:
        sys.stderr.write(f"{PROG}: interrupted\n")
        return 130


# ---- plugin-info: what the runner asks of a factory, in a child process -----------------------


def plugin_info(argv: Sequence[str]) -> int:
    """``plugin-info MODULE:FACTORY``: loads the factory and prints one JSON line: ``{"ok": true,
    "name", "version", "features"}``, or ``{"ok": false, "here": true when the library cannot
    be used here (LibraryMissing, Unsupported), "error", "message"}`` with exit status 4."""
    from . import protocol
    from ._bridge import load_factory

    if len(argv) != 1:
        sys.stderr.write("offloadkit plugin-info: needs MODULE:FACTORY alone\n")
        return USAGE
    try:
        plugin = load_factory(absolute_factory(argv[0]))()
    except Exception as e:  # the factory's own error is the answer
        here = isinstance(e, (adapters.LibraryMissing, adapters.Unsupported))
        print(json.dumps({"ok": False, "here": here,
                          "error": f"{type(e).__module__}.{type(e).__qualname__}",
                          "message": str(e)}))
        return 4
    print(json.dumps({"ok": True, "name": str(getattr(plugin, "name", "")),
                      "version": str(getattr(plugin, "version", "")),
                      "features": [f for f in protocol.FEATURES
                                   if getattr(plugin, f, None) is not None]}))
    return 0
