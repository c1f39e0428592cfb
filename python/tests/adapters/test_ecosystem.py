"""``python -m offloadkit ecosystem``'s parts that need no extension module: the adapters' table
against the modules and the package docstring, the shipped classifications, how a check's end is
read, which classifications a run can judge, the description and the exit status. The whole
pipeline (real checks over the stand-ins, offloadkit's C++ conformance command) is ctest's
python_module.ecosystem_* (ecosystem.cmake).

    PYTHONPATH=python python3 -m unittest discover -s python/tests/adapters -p "test_*.py"
"""

import contextlib
import importlib
import io
import json
import os
import re
import shutil
import stat
import subprocess
import tempfile
import unittest
from unittest import mock

from offloadkit import adapters, ecosystem
from offloadkit.protocol import FEATURES

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__)))))
NAMES = [a.name for a in adapters.ADAPTERS]
MISSING = {"ok": False, "here": True, "error": "offloadkit.adapters.LibraryMissing",
           "message": "offloadkit.adapters.trl: the library module 'trl' cannot be imported here "
                      "(No module named 'trl')"}
BROKEN = {"ok": False, "here": False, "error": "builtins.AttributeError",
          "message": "module 'vllm' has no attribute 'x'"}
LOADED = {"ok": True, "name": "trl", "version": "1.0", "features": ["activation"]}


class AdapterTableTest(unittest.TestCase):
    def test_each_entry_names_its_module_factory_library_and_distribution(self):
        self.assertEqual(len(NAMES), len(set(NAMES)))
        for a in adapters.ADAPTERS:
            with self.subTest(a.name):
                module_name, _, function = a.factory.partition(":")
                module = importlib.import_module(module_name)
                self.assertTrue(callable(getattr(module, function)))
                self.assertEqual(module.LIBRARY, a.library)
                self.assertEqual(module.DISTRIBUTION, a.distribution)
                self.assertIn(a.feature, FEATURES)
                self.assertTrue(a.adds)
                self.assertRegex(a.name, r"^[a-z0-9_-]+$")  # a file name and an anchor

    def test_the_package_docstring_runs_exactly_the_tables_factories(self):
        doc = adapters.__doc__
        block = doc[doc.index("Running against the real libraries"):]
        block = block[:block.index("and the same with")]
        commands = set(re.findall(r"offloadkit check (\S+)", block))
        self.assertEqual(commands, {a.factory for a in adapters.ADAPTERS})
        for a in adapters.ADAPTERS:
            module, _, function = a.factory.partition(":")
            self.assertIn(f"``{module}`` ({a.feature})", doc)
            self.assertIn(f"``{function}``", doc)


class ClassifiedTest(unittest.TestCase):
    def write(self, doc):
        f = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
        self.addCleanup(os.remove, f.name)
        json.dump(doc, f) if not isinstance(doc, str) else f.write(doc)
        f.close()
        return f.name

    def refused(self, doc, message):
        with self.assertRaises(ecosystem.Stop) as caught:
            ecosystem.read_classified(self.write(doc), NAMES)
        self.assertEqual(caught.exception.status, ecosystem.FILE_ERROR)
        self.assertRegex(str(caught.exception), message)

    def test_the_shipped_file_reads_and_is_installed_with_the_package(self):
        classified = ecosystem.read_classified(ecosystem.DEFAULT_CLASSIFIED, NAMES)
        self.assertEqual(classified["torch_memory_saver"][0]["property"], "region/many_cycles")
        self.assertEqual({e["property"] for e in classified["vllm"]},
                         {"region/swap_keeps_both", "region/multi_device",
                          "region/adjacent_allocations", "region/driver_faults"})
        # A defect comes with where upstream stands and a reproducer of the library alone, whose
        # script is in the repository.
        for entries in classified.values():
            for entry in entries:
                if entry["class"] != "defect":
                    continue
                self.assertIn("upstream", entry)
                script = entry["reproducer"].split()[1]
                self.assertTrue(script.startswith("reproducers/"), entry["reproducer"])
                self.assertTrue(os.path.isfile(os.path.join(ROOT, script)), script)
        with open(os.path.join(ROOT, "setup.py")) as f:
            self.assertIn('"offloadkit.adapters": ["classified.json"]', f.read())

    def test_what_is_refused_names_the_pointer(self):
        base = {"format": "offloadkit.classified", "format_version": 1}
        entry = {"property": "region/many_cycles", "class": "defect", "evidence": "x"}
        self.refused("{", "not valid JSON")
        self.refused(dict(base, libraries={"vlm": []}),
                     "at /libraries/vlm: vlm is not one of the adapters' names torch_memory_saver")
        self.refused(dict(base, libraries={"vllm": [dict(entry, **{"class": "bug"})]}),
                     "at /libraries/vllm/0/class: 'bug' is not one of the valid classes defect, "
                     "limitation")
        self.refused(dict(base, libraries={"vllm": [dict(entry, issue="1")]}),
                     "at /libraries/vllm/0/issue: is not a known key")
        self.refused(dict(base, libraries={"vllm": [entry, entry]}),
                     "at /libraries/vllm/1/property: 'region/many_cycles' is classified twice")
        self.refused(dict(base, libraries={"vllm": [dict(entry, intermittent="yes")]}),
                     "at /libraries/vllm/0/intermittent: must be true or false")
        self.refused(dict(base, libraries={"vllm": [dict(entry, intermittent=True,
                                                        **{"class": "limitation"})]}),
                     "at /libraries/vllm/0/intermittent: only a defect is intermittent")
        self.refused(dict(base, libraries={"vllm": [{"property": "many_cycles"}]}),
                     "needs the key \"class\"")
        self.refused({"format": "other"}, "at /format: must be")
        with self.assertRaises(ecosystem.Stop) as caught:
            ecosystem.read_classified("/nonexistent/classified.json", NAMES)
        self.assertIn("cannot be read", str(caught.exception))


class CheckEndTest(unittest.TestCase):
    def test_how_each_end_reads(self):
        v = ecosystem.verdict_of_check
        out = "...\noffloadkit check: Python plugin trl has no property to run on the host executor"
        # Properties ran (1: one does not hold): the report goes into the matrix.
        self.assertEqual(v(0, LOADED, True, ""), ("", 0))
        self.assertEqual(v(1, LOADED, True, ""), ("", 0))
        self.assertEqual(v(1, MISSING, True, ""), ("", 0))
        why, status = v(1, LOADED, False, out)
        self.assertEqual(status, ecosystem.ADAPTER_ERROR)
        self.assertIn("wrote no report", why)
        # Exit status 4: the library does not import (never a failure), the adapter is broken,
        # or there is nothing to run on this executor.
        self.assertEqual(v(4, MISSING, False, "anything"), (MISSING["message"], 0))
        why, status = v(4, BROKEN, False, "")
        self.assertEqual(status, ecosystem.ADAPTER_ERROR)
        self.assertIn("the adapter cannot be loaded: builtins.AttributeError", why)
        self.assertEqual(v(4, LOADED, False, out),
                         ("Python plugin trl has no property to run on the host executor", 0))
        why, status = v(3, LOADED, False, "offloadkit check: the cuda executor is unavailable")
        self.assertEqual((why, status), ("the executor cannot run here: the cuda executor is "
                                         "unavailable", ecosystem.CANNOT_RUN))
        why, status = v(-11, LOADED, True, "Segmentation fault")
        self.assertEqual(status, ecosystem.ADAPTER_ERROR)
        self.assertIn("was killed by signal 11", why)
        self.assertEqual(v(2, LOADED, False, "")[1], ecosystem.ADAPTER_ERROR)

    def test_the_exit_status_takes_the_worst(self):
        self.assertEqual(ecosystem.exit_status([0, 0, 0]), 0)
        self.assertEqual(ecosystem.exit_status([0, 1]), 1)
        self.assertEqual(ecosystem.exit_status([1, 3, 0]), 3)
        self.assertEqual(ecosystem.exit_status([3, 4, 1]), 4)
        self.assertEqual(ecosystem.exit_status([4, 5]), 5)


def report(kind, rows):
    doc = {"format": "offloadkit.report", "format_version": 1, "kind": kind}
    doc["properties" if kind == "properties" else "features"] = rows
    return doc


class DescriptionTest(unittest.TestCase):
    def setUp(self):
        self.out = tempfile.mkdtemp()
        with open(os.path.join(self.out, "vllm.json"), "w") as f:
            json.dump(report("properties", [
                {"feature": "region", "property": "swap_keeps_both", "verdict": "fails"},
                {"feature": "region", "property": "multi_device", "verdict": "skipped",
                 "reason": "needs two GPUs"},
                {"feature": "region", "property": "round_trip", "verdict": "holds"}]), f)
        with open(os.path.join(self.out, "vllm-faults.json"), "w") as f:
            json.dump(report("driver_faults", [{"feature": "region", "cases": []}]), f)

    def outcome(self, reports):
        return ecosystem.Outcome("vllm", "offloadkit.adapters.vllm:make", "a tag per region",
                                 version="0.9", reports=reports)

    def test_a_classification_the_run_cannot_judge_is_left_out_with_a_note(self):
        entries = [{"property": p, "class": "limitation", "evidence": "docs"}
                   for p in ("region/swap_keeps_both", "region/multi_device",
                             "region/driver_faults", "region/renamed_property")]
        o = self.outcome(["vllm.json"])
        kept = ecosystem.applicable(o, entries, self.out, driver_faults=False)
        # A property no report has stays: offloadkit conformance calls it stale.
        self.assertEqual([e["property"] for e in kept],
                         ["region/swap_keeps_both", "region/renamed_property"])
        self.assertEqual(len(o.notes), 2)
        self.assertIn("region/multi_device not applied: skipped here (needs two GPUs)",
                      o.notes[0])
        self.assertIn("region/driver_faults not applied: driver faults were not checked",
                      o.notes[1])
        o = self.outcome(["vllm.json", "vllm-faults.json"])
        kept = ecosystem.applicable(o, entries, self.out, driver_faults=True)
        self.assertIn("region/driver_faults", [e["property"] for e in kept])

    def test_libraries_run_and_not_run(self):
        ran = self.outcome(["vllm.json"])
        missing = ecosystem.Outcome("trl", "offloadkit.adapters.trl:make_single_stream",
                                    "one object per case", not_run=MISSING["message"])
        classified = {"vllm": [{"property": "region/swap_keeps_both", "class": "limitation",
                                "evidence": "docs"}],
                      "trl": [{"property": "activation/round_trip", "class": "defect",
                               "evidence": "x"}]}
        doc = ecosystem.description([ran, missing], classified, self.out, False)
        self.assertEqual(doc["format"], "offloadkit.conformance")
        vllm, trl = doc["libraries"]
        self.assertEqual(vllm["reports"], ["vllm.json"])
        self.assertEqual(vllm["version"], "0.9")
        self.assertEqual(vllm["classified"], classified["vllm"])
        self.assertEqual(vllm["adapter"], "offloadkit.adapters.vllm:make")
        # Not run: its reason, no reports and no classifications (it has no failures).
        self.assertEqual(trl, {"name": "trl",
                               "adapter": "offloadkit.adapters.trl:make_single_stream",
                               "not_run": MISSING["message"], "notes": "one object per case"})


class CommittedMatrixTest(unittest.TestCase):
    """conformance/conformance.json (what CONFORMANCE.md is made from) carries each library's
    classifications as classified.json has them today, less those its run could not judge."""

    def test_the_committed_description_has_the_classifications_of_today(self):
        with open(os.path.join(ROOT, "conformance", "conformance.json")) as f:
            doc = json.load(f)
        classified = ecosystem.read_classified(ecosystem.DEFAULT_CLASSIFIED, NAMES)
        self.assertEqual(sorted(lib["name"] for lib in doc["libraries"]),
                         sorted(n for n in NAMES))
        for lib in doc["libraries"]:
            outcome = ecosystem.Outcome(lib["name"], lib["adapter"], "")
            outcome.reports = lib["reports"]
            want = ecosystem.applicable(outcome, classified.get(lib["name"], []),
                                        os.path.join(ROOT, "conformance"), True)
            self.assertEqual(lib.get("classified", []), want, lib["name"])


class ScheduleTest(unittest.TestCase):
    def test_region_batteries_run_alone_first_and_the_order_is_kept(self):
        import threading
        import time

        lock = threading.Lock()
        running, overlaps, started = set(), [], []
        tasks = [(a, suffix) for a in adapters.ADAPTERS for suffix in ("", "-faults")]

        def alone(task):
            return task[1] == "" and task[0].feature in ecosystem.ALONE_FEATURES

        def one(task):
            with lock:
                started.append(task)
                if running and (alone(task) or any(alone(t) for t in running)):
                    overlaps.append((task, sorted(running, key=str)))
                running.add(task)
            time.sleep(0.05)
            with lock:
                running.discard(task)
            return task[0].name + task[1]

        results = ecosystem.schedule(tasks, alone, one, 4)
        self.assertEqual(results, [a.name + s for a, s in tasks])
        self.assertEqual(overlaps, [])
        batteries = [t for t in tasks if alone(t)]
        self.assertGreater(len(batteries), 0)
        self.assertEqual(started[:len(batteries)], batteries)
        # The others did run side by side (the pool is used), region countdowns among them.
        self.assertEqual(sorted(started[len(batteries):], key=str),
                         sorted((t for t in tasks if not alone(t)), key=str))
        self.assertIn((batteries[0][0], "-faults"), started[len(batteries):])
        # The runner's own choice of what runs alone is this one.
        for adapter, suffix in tasks:
            run = ecosystem.Run(1, adapter, adapter.factory, suffix, [], {})
            self.assertEqual(run.alone, alone((adapter, suffix)), adapter.name + suffix)

    def test_a_library_whose_batteries_did_not_run_is_not_run_here(self):
        adapter = adapters.ADAPTERS[0]
        battery = ecosystem.Run(1, adapter, adapter.factory, "", [], {}, why="no torch",
                                status=ecosystem.ADAPTER_ERROR)
        faults = ecosystem.Run(1, adapter, adapter.factory, "-faults", ["--driver-faults"], {},
                               summary="5 case(s)")
        outcome = ecosystem.merge_runs(
            ecosystem.Outcome(adapter.name, adapter.factory, adapter.adds), [battery, faults],
            "unused")
        self.assertEqual((outcome.not_run, outcome.status, outcome.reports),
                         ("no torch", ecosystem.ADAPTER_ERROR, []))
        battery.why, battery.status, battery.summary = "", ecosystem.COMPLETE, "9 hold"
        faults.why, faults.status = "timed out", ecosystem.ADAPTER_ERROR
        outcome = ecosystem.merge_runs(
            ecosystem.Outcome(adapter.name, adapter.factory, adapter.adds), [battery, faults],
            "unused")
        self.assertEqual((outcome.not_run, outcome.status, outcome.reports, outcome.summary,
                          outcome.notes),
                         ("", ecosystem.ADAPTER_ERROR, [adapter.name + ".json"], "9 hold",
                          ["driver faults not checked: timed out"]))


class PropertySplitTest(unittest.TestCase):
    """With --jobs above 1, a library is checked in parts: its properties that read the device's
    free memory in one check, every other property in one of its own, each part's report on its
    own; the library is one column all the same."""

    def setUp(self):
        self.out = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.out)
        self.adapter = next(a for a in adapters.ADAPTERS if a.name == "megatron")

    def report(self, name, **summary):
        with open(os.path.join(self.out, name), "w", encoding="utf-8") as f:
            json.dump({"summary": summary}, f)

    def parts(self, props, adapter=None):
        adapter = adapter or self.adapter
        return [ecosystem.Run(1, adapter, adapter.factory, "", [], {}, prop=p) for p in props]

    def test_only_the_properties_that_read_free_memory_run_alone(self):
        region = next(a for a in adapters.ADAPTERS if a.feature == "region")
        readers = ecosystem.Run(1, region, region.factory, "", [], {}, readers=True)
        runs = [readers] + self.parts(["model_based", "cross_stream_order"], region)
        self.assertEqual([r.alone for r in runs], [True, False, False])
        self.assertEqual(readers.report, region.name + ".free-memory.json")
        # Checked whole, a region battery runs alone; its countdown never does.
        self.assertTrue(ecosystem.Run(1, region, region.factory, "", [], {}).alone)
        self.assertFalse(ecosystem.Run(1, region, region.factory, "-faults", [], {}).alone)
        # A stash library's readers run alone too.
        self.assertTrue(ecosystem.Run(1, self.adapter, self.adapter.factory, "", [], {},
                                      readers=True).alone)

    def test_every_library_with_listed_properties_is_split(self):
        region = next(a for a in adapters.ADAPTERS if a.feature == "region")
        listings = {region.factory: [("model_based", False), ("release_is_real", True),
                                     ("many_cycles", True)],
                    self.adapter.factory: [("round_trip", False)]}
        o = ecosystem.parser().parse_args(["--jobs", "4", "--out", self.out, "--only",
                                           region.name, "--only", self.adapter.name])
        ecosystem.check_values(ecosystem.parser(), o)
        seen = []

        def check_run(run, *_):
            seen.append((run.name, run.alone))
            run.why, run.status = "stand-in", ecosystem.COMPLETE
            return run

        with mock.patch.object(ecosystem, "prepare_library",
                               side_effect=lambda a, f, o, out: (
                                   ecosystem.Outcome(a.name, f, a.adds), {"ok": True})), \
                mock.patch.object(ecosystem, "battery_properties",
                                  side_effect=lambda f, e: listings[f]), \
                mock.patch.object(ecosystem, "check_run", side_effect=check_run), \
                mock.patch.object(ecosystem, "resolve_executor", return_value=("host", "test")), \
                mock.patch.object(ecosystem, "find_offloadkit", return_value="offloadkit"), \
                mock.patch.object(ecosystem, "native"), \
                mock.patch.object(ecosystem, "progress"), \
                mock.patch.object(ecosystem.subprocess, "run",
                                  return_value=subprocess.CompletedProcess([], 0, "", "")), \
                contextlib.redirect_stdout(io.StringIO()):
            ecosystem.run(o)
        # The readers first, in one check, alone; then the rest (side by side, in any order).
        self.assertEqual(seen[0], (region.name + ".free-memory", True))
        self.assertEqual(sorted(seen[1:]), sorted([(region.name + ".model_based", False),
                                                   (self.adapter.name + ".round_trip", False)]))

    def test_each_part_has_its_report_and_the_summary_adds_them_up(self):
        runs = self.parts(["round_trip", "config_edges", "storage_dedup", "two_devices",
                           "caller_writes_late"])
        self.assertEqual([r.report for r in runs][:3], ["megatron.round_trip.json",
                                                         "megatron.config_edges.json",
                                                         "megatron.storage_dedup.json"])
        self.assertFalse(any(r.alone for r in runs))
        self.report("megatron.round_trip.json", holds=0, fails=1, properties=1, seconds=20.0)
        self.report("megatron.config_edges.json", holds=1, properties=1, seconds=41.2,
                    shutdown_findings=1)
        self.report("megatron.storage_dedup.json", not_applicable=1, properties=1, seconds=2.0)
        self.report("megatron.two_devices.json", skipped=1, properties=1, seconds=0.5)
        self.report("megatron.caller_writes_late.json", holds=1, properties=1, seconds=9.0)
        # The properties that read free memory, in one check of their own.
        runs.append(ecosystem.Run(1, self.adapter, self.adapter.factory, "", [], {},
                                  readers=True))
        self.report("megatron.free-memory.json", holds=3, properties=3, seconds=30.0)
        faults = ecosystem.Run(1, self.adapter, self.adapter.factory, "-faults",
                               ["--driver-faults"], {}, summary="driver faults: 5 clean")
        outcome = ecosystem.merge_runs(
            ecosystem.Outcome(self.adapter.name, self.adapter.factory, ""), runs + [faults],
            self.out)
        self.assertEqual(outcome.reports, [r.report for r in runs] + ["megatron-faults.json"])
        self.assertEqual(outcome.summary,
                         "5 hold, 1 fail, 1 not applicable, 1 skipped (8 properties in 6 "
                         "checks, the longest 41 s); 1 shutdown findings")

    def test_one_part_that_did_not_run_makes_the_library_not_run_here(self):
        runs = self.parts(["round_trip", "config_edges"])
        self.report("megatron.round_trip.json", holds=1, properties=1)
        runs[1].why, runs[1].status = "no torch", ecosystem.ADAPTER_ERROR
        outcome = ecosystem.merge_runs(
            ecosystem.Outcome(self.adapter.name, self.adapter.factory, ""), runs, self.out)
        self.assertEqual((outcome.not_run, outcome.status, outcome.reports),
                         ("no torch", ecosystem.ADAPTER_ERROR, []))

    def test_the_countdowns_start_first_and_each_group_keeps_the_table_order(self):
        region = adapters.ADAPTERS[0]
        runs = [ecosystem.Run(1, region, region.factory, "", [], {}),
                ecosystem.Run(1, region, region.factory, "-faults", ["--driver-faults"], {})]
        runs += self.parts(["round_trip", "config_edges"])
        runs.append(ecosystem.Run(2, self.adapter, self.adapter.factory, "-faults",
                                  ["--driver-faults"], {}))
        self.assertEqual([r.name for r in ecosystem.start_order(runs)],
                         [region.name + "-faults", "megatron-faults", region.name,
                          "megatron.round_trip", "megatron.config_edges"])

    def test_the_command_names_the_part_and_its_report(self):
        o = ecosystem.parser().parse_args(["--cases", "8"])
        ecosystem.check_values(ecosystem.parser(), o)
        readers = ecosystem.Run(1, self.adapter, self.adapter.factory, "", [], {}, readers=True)
        for run, option, stem in ((self.parts(["config_edges"])[0], "--property=config_edges",
                                   "megatron.config_edges"),
                                  (readers, "--free-memory=only", "megatron.free-memory")):
            with mock.patch.object(ecosystem, "run_logged", return_value=(0, "")) as logged, \
                    mock.patch.object(ecosystem, "progress"):
                self.report(stem + ".json", holds=1, properties=1)
                ecosystem.check_run(run, o, "cuda", self.out)
            command, log = logged.call_args[0]
            self.assertEqual(command[-4:], ["--cases=8", option, "--report",
                                            os.path.join(self.out, stem + ".json")])
            self.assertEqual(log, os.path.join(self.out, stem + ".log"))

    def test_the_properties_are_listed_by_list_cases(self):
        listing = json.dumps({"cases": [
            {"name": "round_trip", "reads_free_memory": False},
            {"name": "release_is_real", "reads_free_memory": True},
            {"name": "older"}]})
        done = subprocess.CompletedProcess([], 0, stdout="note\n" + listing + "\n", stderr="")
        with mock.patch.object(ecosystem.subprocess, "run", return_value=done) as ran:
            # A listing that does not say is taken to say the property reads free memory.
            self.assertEqual(ecosystem.battery_properties("m:f", "cuda"),
                             [("round_trip", False), ("release_is_real", True), ("older", True)])
        self.assertEqual(ran.call_args[0][0][-4:], ["list-cases", "m:f", "--executor", "cuda"])
        failed = subprocess.CompletedProcess([], 4, stdout="", stderr="Traceback")
        with mock.patch.object(ecosystem.subprocess, "run", return_value=failed):
            self.assertEqual(ecosystem.battery_properties("m:f", "cuda"), [])


class UsageTest(unittest.TestCase):
    def usage(self, args):
        p = ecosystem.parser()
        err = io.StringIO()
        with contextlib.redirect_stderr(err), self.assertRaises(SystemExit) as caught:
            ecosystem.check_values(p, p.parse_args(args))
        self.assertEqual(caught.exception.code, 2)
        return err.getvalue()

    def test_bad_values_are_named_with_what_is_valid(self):
        self.assertIn("--executor: gpu is not one of the valid values auto, host, cuda",
                      self.usage(["--executor", "gpu"]))
        self.assertIn("--cases: 0 is out of range: valid range 1..1000000",
                      self.usage(["--cases", "0"]))
        self.assertIn("--timeout: 1e3 is not an integer", self.usage(["--timeout", "1e3"]))
        self.assertIn("--only: tms is not one of the valid names torch_memory_saver, ",
                      self.usage(["--only", "tms"]))
        self.assertIn("--factory: 'vllm' is not NAME=MODULE:FACTORY",
                      self.usage(["--factory", "vllm"]))
        self.assertIn("--factory: tms is not one of the valid names",
                      self.usage(["--factory", "tms=a.py:make"]))
        self.assertIn("--factory: vllm is given twice",
                      self.usage(["--factory", "vllm=a:b", "--factory", "vllm=c:d"]))
        self.assertIn("--driver-faults: needs the cuda executor",
                      self.usage(["--driver-faults", "--executor", "host"]))
        self.assertIn("--fast: unknown option: valid options are --help, --executor",
                      self.usage(["--fast"]))

    def test_a_factory_file_is_made_absolute(self):
        p = ecosystem.parser()
        o = p.parse_args(["--factory", "vllm=tests/f.py:make", "--cases", "5"])
        ecosystem.check_values(p, o)
        self.assertEqual(o.factory, {"vllm": os.path.abspath("tests/f.py") + ":make"})
        self.assertEqual(o.cases, 5)


class CommandTest(unittest.TestCase):
    def test_the_cxx_command_is_found_or_named(self):
        # Without the program the package ships (or a build tree's beside it).
        with mock.patch.object(ecosystem, "program_path", return_value=None):
            self._found_or_named()

    def _found_or_named(self):
        with self.assertRaises(ecosystem.Stop) as caught:
            ecosystem.find_offloadkit(None, {"PATH": "/nonexistent"})
        self.assertEqual(caught.exception.status, ecosystem.CANNOT_RUN)
        self.assertIn("offloadkit's C++ command not found (PATH: offloadkit is not on PATH)",
                      str(caught.exception))
        with self.assertRaises(ecosystem.Stop) as caught:
            ecosystem.find_offloadkit("/nonexistent/offloadkit", {"OFFLOADKIT": "/bin/true"})
        self.assertIn("(--offloadkit: /nonexistent/offloadkit)", str(caught.exception))
        # A command without `conformance` (the Python package's console script, say).
        folder = tempfile.mkdtemp()
        fake = os.path.join(folder, "offloadkit")
        with open(fake, "w") as f:
            f.write("#!/bin/sh\necho 'offloadkit: conformance: unknown command' >&2\nexit 2\n")
        os.chmod(fake, stat.S_IRWXU)
        with self.assertRaises(ecosystem.Stop) as caught:
            ecosystem.find_offloadkit(None, {"OFFLOADKIT": fake})
        self.assertIn(f"{fake} (OFFLOADKIT) is not offloadkit's C++ command",
                      str(caught.exception))
        with open(fake, "w") as f:
            f.write("#!/bin/sh\necho '{\"format\": \"offloadkit.conformance\"}'\n")
        self.assertEqual(ecosystem.find_offloadkit(None, {"PATH": folder}), fake)
        # The package's own program comes before PATH, after OFFLOADKIT.
        with mock.patch.object(ecosystem, "program_path", return_value=fake):
            self.assertEqual(ecosystem.find_offloadkit(None, {"PATH": "/nonexistent"}), fake)
            with self.assertRaises(ecosystem.Stop) as caught:
                ecosystem.find_offloadkit(None, {"OFFLOADKIT": "/nonexistent/offloadkit"})
            self.assertIn("(OFFLOADKIT: /nonexistent/offloadkit)", str(caught.exception))

    def test_the_executor(self):
        self.assertEqual(ecosystem.resolve_executor("auto", "no driver")[0], "host")
        self.assertEqual(ecosystem.resolve_executor("auto", "")[0], "cuda")
        self.assertEqual(ecosystem.resolve_executor("host", "")[0], "host")
        with self.assertRaises(ecosystem.Stop) as caught:
            ecosystem.resolve_executor("cuda", "no driver")
        self.assertEqual(caught.exception.status, ecosystem.CANNOT_RUN)


if __name__ == "__main__":
    unittest.main()
