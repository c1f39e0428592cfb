"""offloadkit's pytest plugin: offloadkit's property batteries as pytest items.

Registered through the ``pytest11`` entry point of an installed offloadkit, or loaded with
``pytest -p offloadkit.pytest``. Two ways to ask for a battery:

- in a test module::

      from offloadkit.pytest import battery
      test_my_stash = battery("my_pkg.offload:make", feature="stash")

- on the command line: ``pytest --offloadkit my_pkg.offload:make``.

Either gives one pytest item per property and executor (``[host]``, ``[cuda]``), named
``feature/implementation/property``, and after them one ``shutdown[EXECUTOR]`` item per battery.
Each item runs ``python -m offloadkit check`` for that one property in a child process of this
interpreter (which runs the property in a child of its own):
a crash or a hang of the code under test fails that item only. A failing item shows the seed, the
shrunk counterexample and the command that replays it. A property that cannot run here (the cuda
executor without a usable GPU, a property that needs two GPUs on one) is *skipped* with the
reason, never passed; one the implementation's declared profile rules out is skipped as "not
applicable".

A property's process that crashes, hangs or exits with an unexpected status *after* its result
(at interpreter exit, say) does not fail the property's item: its verdict is its cases'. The
battery's ``shutdown[EXECUTOR]`` item, run after its properties, fails once for all of them,
naming how the processes ended, which properties, the last lines of the output and a command that
replays one; it passes when every process exited cleanly (and is skipped when none ran). With
``-p no:randomly`` or any plugin that reorders items, it must still run after the properties.

Options: ``--offloadkit MODULE:FACTORY`` (repeatable), ``--offloadkit-seed N`` (default: one fresh
seed for the session, in the header), ``--offloadkit-cases N``, ``--offloadkit-executor
host|cuda`` (default both), ``--offloadkit-timeout SECONDS`` and ``--offloadkit-report FILE.json``
(every item's verdict and evidence in one JSON conformance report).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import tempfile
from typing import Any, Dict, List, Optional, Sequence

import pytest

from ._commandline import absolute_factory, integer_in

EXECUTORS = ("host", "cuda")
_BATTERY_ATTRIBUTE = "_offloadkit_battery"


class Battery:
    """What ``battery()`` asks for: the factory and which of its properties."""

    def __init__(self, factory: str, feature: Optional[str] = None,
                 executors: Sequence[str] = EXECUTORS, implementation: Optional[str] = None,
                 prop: Optional[str] = None, cases: Optional[int] = None) -> None:
        if ":" not in factory:
            raise ValueError(f"battery: factory {factory!r} is not MODULE:FACTORY (e.g. "
                             "my_pkg.offload:make or path/to/offload.py:make)")
        for e in executors:
            if e not in EXECUTORS:
                raise ValueError(f"battery: executor {e!r} is not one of the valid values "
                                 f"{', '.join(EXECUTORS)}")
        if cases is not None and not 1 <= cases <= 1000000:
            raise ValueError(f"battery: cases={cases} is out of range: valid range 1..1000000")
        self.factory = absolute_factory(factory)
        self.feature = feature
        self.executors = tuple(executors)
        self.implementation = implementation
        self.prop = prop
        self.cases = cases


def battery(factory: str, feature: Optional[str] = None,
            executors: Sequence[str] = EXECUTORS, implementation: Optional[str] = None,
            prop: Optional[str] = None, cases: Optional[int] = None):
    """A test that the plugin expands into one item per property and executor of the batteries
    run against ``factory`` ("MODULE:FACTORY"; MODULE a module name or a .py file), only
    ``feature``'s (stash, region, arena, activation) when given, only ``implementation``'s and
    only the property ``prop`` when given. ``cases`` sets the case count of these properties
    (``--offloadkit-cases`` sets it for all). Assign it to a ``test_...`` name in a test module.

    Without the plugin loaded the test fails, saying how to load it: a battery is never passed
    by not running."""
    spec = Battery(factory, feature, executors, implementation, prop, cases)

    def not_expanded() -> None:
        pytest.fail("offloadkit's pytest plugin is not loaded, so this battery did not run: "
                    "install offloadkit (its pytest11 entry point loads the plugin) or run "
                    "pytest -p offloadkit.pytest", pytrace=False)

    setattr(not_expanded, _BATTERY_ATTRIBUTE, spec)
    return not_expanded


# ---- options ---------------------------------------------------------------------------------


def _int_in(low: int, high: int, option: str):
    def parse(text: str) -> int:
        try:
            return integer_in(text, low, high)
        except ValueError as e:
            raise pytest.UsageError(f"{option}: {e}") from None
    return parse


def pytest_addoption(parser) -> None:
    group = parser.getgroup("offloadkit", "offloadkit property batteries")
    group.addoption("--offloadkit", action="append", default=[], metavar="MODULE:FACTORY",
                    help="run the batteries against this Python implementation (repeatable)")
    group.addoption("--offloadkit-seed", default=None, metavar="N",
                    help="seed of every property (default: one fresh seed per session)")
    group.addoption("--offloadkit-cases", default=None, metavar="N",
                    help="cases per property, 1..1000000 (default: each property's own)")
    group.addoption("--offloadkit-executor", action="append", default=None,
                    choices=list(EXECUTORS),
                    help="only this executor's items (default: host and cuda)")
    group.addoption("--offloadkit-timeout", default="600", metavar="SECONDS",
                    help="time limit of one property, 1..86400 (default 600)")
    group.addoption("--offloadkit-report", default=None, metavar="FILE.json",
                    help="write every item's verdict and evidence into one JSON report")


class _Session:
    """The options as read once, and the rows the report collects."""

    def __init__(self, config) -> None:
        seed = config.getoption("--offloadkit-seed")
        self.seed = (_int_in(1, 2**64 - 1, "--offloadkit-seed")(seed) if seed is not None
                     else random.SystemRandom().randrange(1, 2**63))
        self.seed_fresh = seed is None
        cases = config.getoption("--offloadkit-cases")
        self.cases = (_int_in(1, 1000000, "--offloadkit-cases")(cases) if cases is not None
                      else None)
        self.timeout = _int_in(1, 86400, "--offloadkit-timeout")(
            config.getoption("--offloadkit-timeout"))
        self.executors = tuple(config.getoption("--offloadkit-executor") or EXECUTORS)
        self.report = config.getoption("--offloadkit-report")
        if self.report is not None and not self.report.endswith(".json"):
            raise pytest.UsageError(f"--offloadkit-report: {self.report!r} does not end in "
                                    ".json: valid extensions are .json (for .md and .html, run "
                                    "python -m offloadkit check --report)")
        self.factories = [absolute_factory(f) for f in config.getoption("--offloadkit")]
        for f in self.factories:
            if ":" not in f:
                raise pytest.UsageError(f"--offloadkit: {f!r} is not MODULE:FACTORY (e.g. "
                                        "my_pkg.offload:make)")
        self.rows: List[Dict[str, Any]] = []
        self.listings: Dict[Any, Dict[str, Any]] = {}
        # Per battery and executor: how many of its properties ran in a process, and the rows
        # whose processes went wrong after their results.
        self.ran: Dict[Any, int] = {}
        self.shutdowns: Dict[Any, List[Dict[str, Any]]] = {}

    def listing(self, factory: str, executor: str) -> Dict[str, Any]:
        """The properties of `factory` on `executor` (python -m offloadkit list-cases, in a child
        process: importing the factory may crash)."""
        key = (factory, executor)
        if key not in self.listings:
            run = subprocess.run([sys.executable, "-m", "offloadkit", "list-cases", factory,
                                  "--executor", executor], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True, timeout=self.timeout)
            if run.returncode != 0:
                self.listings[key] = {"error": (run.stderr or run.stdout).strip() or
                                      f"exit status {run.returncode}"}
            else:
                self.listings[key] = json.loads(run.stdout)
        return self.listings[key]


_STATE_KEY = "_offloadkit_session"


def _state(config) -> _Session:
    state = getattr(config, _STATE_KEY, None)
    if state is None:
        state = _Session(config)
        setattr(config, _STATE_KEY, state)
    return state


def pytest_configure(config) -> None:
    _state(config)
    for executor in EXECUTORS:
        config.addinivalue_line("markers", f"{executor}: an offloadkit item on the {executor} "
                                           "executor")
    for feature in ("stash", "region", "arena", "activation"):
        config.addinivalue_line("markers", f"{feature}: an offloadkit item of the {feature} "
                                           "battery")


def pytest_report_header(config) -> List[str]:
    s = _state(config)
    return [f"offloadkit: seed {s.seed}" + (" (fresh; --offloadkit-seed replays it)"
                                            if s.seed_fresh else "")]


# ---- collection ------------------------------------------------------------------------------


class BatteryCollector(pytest.Collector):
    """The properties of one battery: one BatteryItem per property and executor."""

    def __init__(self, *, spec: Battery, **kwargs) -> None:
        super().__init__(**kwargs)
        self.spec = spec

    def collect(self):
        state = _state(self.config)
        for executor in self.spec.executors:
            if executor not in state.executors:
                continue
            listing = state.listing(self.spec.factory, executor)
            if "error" in listing:
                yield BatteryItem.from_parent(self, name=f"load[{executor}]", spec=self.spec,
                                              executor=executor, case=None,
                                              load_error=listing["error"])
                continue
            for case in listing["cases"]:
                if self.spec.feature and case["feature"] != self.spec.feature:
                    continue
                if self.spec.implementation and case["implementation"] != \
                        self.spec.implementation:
                    continue
                if self.spec.prop and case["name"] != self.spec.prop:
                    continue
                name = f"{case['feature']}/{case['implementation']}/{case['name']}[{executor}]"
                yield BatteryItem.from_parent(self, name=name, spec=self.spec, executor=executor,
                                              case=case,
                                              cuda_unavailable=listing["cuda_unavailable"])
            yield ShutdownItem.from_parent(self, name=f"shutdown[{executor}]", executor=executor)


class BatteryFailure(Exception):
    """A property that failed: its text is the item's failure report."""


class BatteryItem(pytest.Item):
    """One property on one executor."""

    def __init__(self, *, spec: Battery, executor: str, case: Optional[Dict[str, Any]],
                 load_error: str = "", cuda_unavailable: str = "", **kwargs) -> None:
        super().__init__(**kwargs)
        self.spec = spec
        self.executor = executor
        self.case = case
        self.load_error = load_error
        self.cuda_unavailable = cuda_unavailable
        if case is not None:
            for label in (executor, case["feature"]):
                self.add_marker(label)

    def _command(self, state: _Session, report: str) -> List[str]:
        c = self.case
        cmd = [sys.executable, "-m", "offloadkit", "check", "--python", self.spec.factory,
               "--executor", self.executor, "--feature", c["feature"], "--implementation",
               c["implementation"], "--property", c["name"], "--seed", str(state.seed),
               "--timeout", str(state.timeout), "--report", report]
        cases = state.cases if state.cases is not None else self.spec.cases
        if cases is not None:
            cmd += ["--cases", str(cases)]
        return cmd

    def runtest(self) -> None:
        state = _state(self.config)
        if self.case is None:
            raise BatteryFailure(f"{self.spec.factory} cannot be loaded for the {self.executor} "
                                 f"executor:\n{self.load_error}")
        if self.executor == "cuda" and self.cuda_unavailable:
            pytest.skip(f"the cuda executor cannot run here: {self.cuda_unavailable}")
        if self.case["not_applicable"]:
            self._record({"feature": self.case["feature"],
                          "implementation": self.case["implementation"],
                          "property": self.case["name"], "executor": self.executor,
                          "verdict": "not_applicable", "reason": self.case["not_applicable"]})
            pytest.skip(f"not applicable: {self.case['not_applicable']}")
        with tempfile.TemporaryDirectory(prefix="offloadkit-pytest-") as scratch:
            report = os.path.join(scratch, "report.json")
            cmd = self._command(state, report)
            # The check's own time limit ends a hung property; this one ends a hung check.
            run = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                 timeout=state.timeout + 120)
            row = self._row(report)
        if row is None:
            raise BatteryFailure(f"python -m offloadkit check ended with exit status "
                                 f"{run.returncode} and no result:\n{run.stdout[-4000:]}")
        self._record(row)
        key = (self.parent.nodeid, self.executor)
        if row.get("reported_result", True) and row.get("verdict") != "not_applicable":
            state.ran[key] = state.ran.get(key, 0) + 1
        if row.get("shutdown"):  # the battery's shutdown item reports it, once
            state.shutdowns.setdefault(key, []).append(row)
        verdict = row.get("verdict")
        if verdict == "holds":
            return
        if verdict in ("skipped", "not_applicable"):
            pytest.skip(row.get("reason") or verdict)
        lines = [f"{row['feature']}/{row['implementation']} {row['property']} on the "
                 f"{row['executor']} executor: FAILED"
                 + (f" ({row['process_end']})" if row.get("process_end") else ""),
                 f"seed: {row.get('seed')}"]
        if row.get("message"):
            lines += ["", row["message"].rstrip()]
        if row.get("output") and row.get("process_end"):
            lines += ["", "last lines of its output:", row["output"].rstrip()]
        lines += ["", f"reproduce: {row.get('reproduce', '')}"]
        if row.get("debug"):
            lines.append(f"debug: {row['debug']}")
        raise BatteryFailure("\n".join(lines))

    def _row(self, report: str) -> Optional[Dict[str, Any]]:
        try:
            with open(report, encoding="utf-8") as f:
                rows = json.load(f).get("properties", [])
        except FileNotFoundError:
            return None
        return rows[0] if rows else None

    def _record(self, row: Dict[str, Any]) -> None:
        state = _state(self.config)
        if state.report is not None:
            row = dict(row)
            row["factory"] = self.spec.factory
            row["pytest_item"] = self.nodeid
            state.rows.append(row)

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, (BatteryFailure, subprocess.TimeoutExpired)):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style)

    def reportinfo(self):
        return self.path, None, f"offloadkit {self.name}"


class ShutdownItem(pytest.Item):
    """How the processes of one battery's properties ended after their results, on one executor:
    one finding for all of them, not a failure of each property."""

    def __init__(self, *, executor: str, **kwargs) -> None:
        super().__init__(**kwargs)
        self.executor = executor
        self.add_marker(executor)

    def runtest(self) -> None:
        state = _state(self.config)
        key = (self.parent.nodeid, self.executor)
        if not state.ran.get(key):
            pytest.skip(f"no property of this battery ran in a process on the {self.executor} "
                        "executor")
        found = state.shutdowns.get(key, [])
        if not found:
            return
        lines = []
        for end in dict.fromkeys(r["shutdown"] for r in found):
            rows = [r for r in found if r["shutdown"] == end]
            first = rows[0]
            lines += [f"{len(rows)} of {state.ran[key]} properties' processes on the "
                      f"{self.executor} executor {end}; each property's verdict stands: "
                      + ", ".join(f"{r['feature']}/{r['implementation']} {r['property']}"
                                  for r in rows)]
            if first.get("output"):
                lines += ["", "last lines of its output:", first["output"].rstrip()]
            lines += ["", f"reproduce: {first.get('reproduce', '')}", ""]
        raise BatteryFailure("\n".join(lines).rstrip())

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, BatteryFailure):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style)

    def reportinfo(self):
        return self.path, None, f"offloadkit {self.name}"


@pytest.hookimpl(tryfirst=True)
def pytest_pycollect_makeitem(collector, name, obj):
    spec = getattr(obj, _BATTERY_ATTRIBUTE, None)
    if isinstance(spec, Battery) and collector.funcnamefilter(name):
        return BatteryCollector.from_parent(collector, name=name, spec=spec)
    return None


def pytest_collection_modifyitems(session, config, items) -> None:
    state = _state(config)
    for factory in state.factories:
        spec = Battery(factory)
        collector = BatteryCollector.from_parent(session, name=f"offloadkit[{factory}]",
                                                 spec=spec)
        items.extend(collector.collect())


def pytest_sessionfinish(session, exitstatus) -> None:
    state = _state(session.config)
    if state.report is None:
        return
    counts: Dict[str, int] = {}
    for row in state.rows:
        counts[row.get("verdict", "?")] = counts.get(row.get("verdict", "?"), 0) + 1
    document = {"format": "offloadkit.report", "kind": "properties", "source": "pytest",
                "header": {"seed": state.seed, "seed_fresh": state.seed_fresh,
                           "cases": state.cases, "python": sys.executable},
                "properties": state.rows,
                "shutdown": [{"battery": battery, "executor": executor, "ran": state.ran.get(
                    (battery, executor), 0), "rows": [
                    {"feature": r["feature"], "implementation": r["implementation"],
                     "property": r["property"], "end": r["shutdown"],
                     "reproduce": r.get("reproduce", "")} for r in rows]}
                    for (battery, executor), rows in state.shutdowns.items()],
                "summary": counts}
    with open(state.report, "w", encoding="utf-8") as f:
        json.dump(document, f, indent=2)
        f.write("\n")
