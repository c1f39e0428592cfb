"""The pytest plugin's outcome for every kind of row the check reports (``offloadkit.pytest``'s
``BatteryItem.runtest``), without pytest's collection: the check's command is not run (its
report is the row under test), so each row kind is pinned to one outcome: holds passes; skipped
and not applicable skip with the reason; fails, crashed and timed out fail with the seed, the
message, the way the process ended and the reproduce command; a check without a result fails
with its exit status and output. The whole plugin as a user runs it is ctest's
python_module.pytest (expect_pytest.cmake).
"""

import json
import subprocess
import types
import unittest
from unittest import mock

import pytest

from offloadkit import pytest as plugin

CASE = {"feature": "arena", "implementation": "numpy", "name": "round_trip",
        "not_applicable": ""}


def row(**fields):
    base = {"feature": "arena", "implementation": "numpy", "property": "round_trip",
            "executor": "host", "seed": 7, "reproduce": "python3 -m offloadkit check --seed 7"}
    base.update(fields)
    return base


class RowOutcomeTest(unittest.TestCase):
    def run_item(self, report_rows, returncode=1, stdout="the check's output"):
        """runtest over a check whose report holds ``report_rows`` (None: no report)."""
        state = types.SimpleNamespace(seed=7, timeout=60, cases=None, ran={}, shutdowns={},
                                      report=None, rows=[])
        item = types.SimpleNamespace(
            case=dict(CASE), executor="host", cuda_unavailable="", load_error="",
            spec=types.SimpleNamespace(factory="m:f", cases=None), config=object(),
            parent=types.SimpleNamespace(nodeid="test_x.py::battery"))
        item._command = lambda state, report: ["check", "--report", report]
        item._record = lambda r: None

        def fake_run(cmd, **kwargs):
            if report_rows is not None:
                with open(cmd[-1], "w", encoding="utf-8") as f:
                    json.dump({"properties": report_rows}, f)
            return subprocess.CompletedProcess(cmd, returncode, stdout=stdout)

        item._row = lambda report: plugin.BatteryItem._row(item, report)
        with mock.patch.object(plugin, "_state", return_value=state), \
                mock.patch.object(plugin.subprocess, "run", side_effect=fake_run):
            plugin.BatteryItem.runtest(item)
        return state

    def test_holds_passes_and_counts_as_a_process_that_ran(self):
        state = self.run_item([row(verdict="holds")], returncode=0)
        self.assertEqual(state.ran, {("test_x.py::battery", "host"): 1})

    def test_skipped_and_not_applicable_rows_skip_with_the_reason(self):
        for verdict, reason in (("skipped", "needs 2 devices, host has 1"),
                                ("not_applicable", "profile says ...")):
            with self.subTest(verdict=verdict):
                with self.assertRaises(pytest.skip.Exception) as caught:
                    self.run_item([row(verdict=verdict, reason=reason)], returncode=0)
                self.assertEqual(str(caught.exception.msg), reason)

    def test_a_failure_fails_with_its_seed_message_and_reproduce_command(self):
        with self.assertRaises(plugin.BatteryFailure) as caught:
            self.run_item([row(verdict="fails", message="falsified after 3 cases")])
        text = str(caught.exception)
        self.assertEqual(text.splitlines()[0],
                         "arena/numpy round_trip on the host executor: FAILED")
        self.assertIn("\nseed: 7\n", text)
        self.assertIn("\nfalsified after 3 cases\n", text)
        self.assertTrue(text.endswith("\nreproduce: python3 -m offloadkit check --seed 7"))

    def test_a_crash_or_a_timeout_fails_with_how_the_process_ended(self):
        for end in ("crashed: signal 11 (SIGSEGV)", "timed out after 60 s"):
            with self.subTest(end=end):
                with self.assertRaises(plugin.BatteryFailure) as caught:
                    self.run_item([row(verdict="fails", process_end=end,
                                       output="last words")])
                text = str(caught.exception)
                self.assertEqual(text.splitlines()[0],
                                 f"arena/numpy round_trip on the host executor: FAILED ({end})")
                self.assertIn("\nlast lines of its output:\nlast words\n", text)

    def test_a_shutdown_after_the_result_is_kept_for_the_shutdown_item(self):
        found = row(verdict="holds", shutdown="crashed: signal 11 (SIGSEGV) after its result")
        state = self.run_item([found], returncode=1)
        self.assertEqual(state.shutdowns, {("test_x.py::battery", "host"): [found]})

    def test_a_check_without_a_result_fails_with_its_status_and_output(self):
        for rows in (None, []):
            with self.subTest(report=rows):
                with self.assertRaises(plugin.BatteryFailure) as caught:
                    self.run_item(rows, returncode=4, stdout="Traceback: cannot import m")
                self.assertEqual(str(caught.exception),
                                 "python -m offloadkit check ended with exit status 4 and no "
                                 "result:\nTraceback: cannot import m")


if __name__ == "__main__":
    unittest.main()
