#!/usr/bin/env python3
"""Mutation testing of the checker's own verdict paths: small wrong changes (an operator, a bound,
a skipped branch, one kind filed under another) made to the code that turns runs into verdicts,
one at a time, each followed by the fast CPU tests that should catch it.

    python3 ci/mutants.py [--build DIR] [--only ID]... [--list] [--check] [--json FILE]
                          [--timeout S]

For each mutant of MUTANTS below: the snippet ``old`` of ``path`` (which must occur there exactly
once) becomes ``new``; the build folder is brought up to date (``cmake --build DIR``, or only the
targets the mutant names, where its file is a header of many targets that its tests do not all
need); ``ctest -R TESTS`` runs; the file is restored. A mutant is *killed* when a test fails (or
the build does, which is named as such), and *survives* when every selected test passes: the tests
were too weak for that path. Survivors that cannot be killed (an equivalent change) say why in
``survives``; any other survivor makes the exit status 1.

The source files are changed in place and always restored (also on SIGINT / SIGTERM); a mutant's
file that has uncommitted changes is refused before anything is changed, so that no work is lost.
At the end the build folder is brought back up to date with the unmutated sources; where a mutant
of the Python package ran, the copy of it that ``python_module.pip_install`` installs into the
build's test virtual environment (a test that needs that fixture reinstalls it, mutated) is
installed again from the unmutated sources, by running that test.

Exit status: 0 every mutant killed or explained; 1 a mutant survived unexplained; 2 bad usage, or
a mutant's ``old`` no longer occurs exactly once (the list is stale: fix the list); 3 the build
folder is not configured, or the build fails without a mutant, or the test virtual environment's
package could not be installed again at the end; 128+N interrupted by signal N.
"""

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
from typing import Dict, List, NamedTuple, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROG = "ci/mutants.py"


class Mutant(NamedTuple):
    id: str
    path: str  #: relative to the repository root
    old: str  #: occurs exactly once in path
    new: str
    tests: str  #: ctest -R regular expression: the fast CPU tests that must catch it
    what: str  #: the wrong change, in words
    survives: str = ""  #: why it cannot be killed (an equivalent change); empty: it must be
    #: the build targets its tests need, where a header of many targets is mutated; empty: all
    targets: tuple = ()


ADAPTERS_UNIT = r"^python_adapters\.unit$"
PIP_INSTALL = r"^python_module\.pip_install$"
INTERPOSE = r"^interpose_tests\.host$"
CONFORMANCE = r"^offloadkit_conformance\."

MUTANTS = (
    # ---- python -m offloadkit ecosystem: how a check's end reads, what a run can judge --------
    Mutant("ecosystem.rc1_not_a_verdict", "python/offloadkit/ecosystem.py",
           "    if rc in (0, 1):  # every property ran",
           "    if rc in (0,):  # every property ran",
           ADAPTERS_UNIT, "a check whose property failed (exit 1) read as a library not run"),
    Mutant("ecosystem.missing_library_is_an_error", "python/offloadkit/ecosystem.py",
           '                return probe["message"], COMPLETE',
           '                return probe["message"], ADAPTER_ERROR',
           ADAPTERS_UNIT, "a library that does not import here counted as an adapter error"),
    Mutant("ecosystem.exit_precedence", "python/offloadkit/ecosystem.py",
           "    for status in PRECEDENCE:",
           "    for status in reversed(PRECEDENCE):",
           ADAPTERS_UNIT, "the exit status takes the mildest of several, not the worst"),
    Mutant("ecosystem.skipped_classification_applied", "python/offloadkit/ecosystem.py",
           '        elif verdict == "skipped":',
           '        elif verdict == "not_applicable":',
           ADAPTERS_UNIT, "a classification of a property skipped here is applied (and stale)"),
    Mutant("ecosystem.faults_not_run_is_library_not_run", "python/offloadkit/ecosystem.py",
           "        elif not run.suffix:\n            outcome.reports.clear()",
           "        elif run.suffix:\n            outcome.reports.clear()",
           ADAPTERS_UNIT, "a driver-fault countdown that did not run makes the library not run, "
           "and a battery that did not run is only a note"),
    Mutant("ecosystem.readers_not_alone", "python/offloadkit/ecosystem.py",
           "        return self.readers or alone(self.adapter)",
           "        return alone(self.adapter)",
           ADAPTERS_UNIT, "a library's properties that read the device's free memory (one "
           "check) run side by side with other checks"),
    Mutant("ecosystem.readers_report_not_read", "python/offloadkit/ecosystem.py",
           "    parts = [r.report for r in runs if r.prop or r.readers]",
           "    parts = [r.report for r in runs if r.prop]",
           ADAPTERS_UNIT, "a library's summary leaves out the properties checked in its "
           "free-memory check"),
    Mutant("ecosystem.split_summary_fails", "python/offloadkit/ecosystem.py",
           "{total['fails']} fail,", "{total['holds']} fail,",
           ADAPTERS_UNIT, "the summary over a battery's per-property reports counts holds as "
           "failures"),
    Mutant("ecosystem.intermittent_limitation", "python/offloadkit/ecosystem.py",
           '            if entry.get("intermittent") and entry["class"] != "defect":',
           '            if entry.get("intermittent") and entry["class"] == "limitation" and False:',
           ADAPTERS_UNIT, "a limitation classified as intermittent is accepted"),
    # ---- the pytest plugin: each row's outcome -------------------------------------------------
    Mutant("pytest.skipped_passes", "python/offloadkit/pytest.py",
           "            pytest.skip(row.get(\"reason\") or verdict)",
           "            return",
           ADAPTERS_UNIT, "a skipped or not-applicable row passes instead of being skipped"),
    Mutant("pytest.no_result_passes", "python/offloadkit/pytest.py",
           "        if row is None:\n            raise BatteryFailure(",
           "        if row is None:\n            return\n            raise BatteryFailure(",
           ADAPTERS_UNIT, "a check that ended without a result (crashed before it, timed out) passes"),
    Mutant("pytest.shutdown_ignored", "python/offloadkit/pytest.py",
           "        if row.get(\"shutdown\"):  # the battery's shutdown item reports it, once",
           "        if False:  # the battery's shutdown item reports it, once",
           ADAPTERS_UNIT, "a crash at exit after the result is reported nowhere"),
    # ---- offloadkit conformance: cells and classifications -------------------------------------
    Mutant("conformance.any_classification", "tools/conformance.cpp",
           "    if (c.property == property) return &c;",
           "    return &c;",
           CONFORMANCE, "a failing cell judged by the library's first classification, whatever "
           "its property"),
    Mutant("conformance.stale_ignored", "tools/conformance.cpp",
           '      } else if (it->second.verdict != "fails") {',
           "      } else if (false) {",
           CONFORMANCE, "a classification of a property that holds now is not stale"),
    Mutant("conformance.every_holding_defect_unseen", "tools/conformance.cpp",
           'c->verdict == "holds" && cls != nullptr && cls->intermittent;',
           'c->verdict == "holds" && cls != nullptr;',
           CONFORMANCE, "a defect that is not intermittent and holds now is not stale"),
    Mutant("conformance.mixed_failures_first_only", "tools/conformance.cpp",
           "      failures.push_back({i, property, &it->second, cls});\n      if (cls == nullptr) {",
           "      failures.push_back({i, property, &it->second, cls});\n"
           "      if (cls == nullptr && failures.size() == 1) {",
           CONFORMANCE, "an unclassified failure after a classified one is not a problem (the "
           "matrix of mixed failures ends with exit status 0)"),
    # ---- python -m offloadkit check: its exit status is the C++ command's -----------------------
    Mutant("module_check.status_dropped", "python/offloadkit/cli.py",
           "    return run_check(forwarded + rest)",
           "    run_check(forwarded + rest)\n    return 0",
           r"^python_module\.check_(numpy|traceback)$", "python -m offloadkit check ends with "
           "exit status 0 whatever the properties' verdicts"),
    # ---- the interposer's ledger: each kind of allocation and release ---------------------------
    Mutant("interpose.pinned_as_device", "interpose/src/interpose.cpp",
           "  const CUresult r = real(pp, bytes);\n  call.finish(r == CUDA_SUCCESS);\n"
           "  if (call.tracked() && r == CUDA_SUCCESS && pp != nullptr)\n"
           "    ledger_add(r_pinned, as_key(*pp), bytes);",
           "  const CUresult r = real(pp, bytes);\n  call.finish(r == CUDA_SUCCESS);\n"
           "  if (call.tracked() && r == CUDA_SUCCESS && pp != nullptr)\n"
           "    ledger_add(r_device, as_key(*pp), bytes);",
           r"^interpose_tests\.host$", "cuMemAllocHost's pinned memory filed as device memory"),
    Mutant("interpose.free_device_as_pinned", "interpose/src/interpose.cpp",
           "if (call.tracked() && r == CUDA_SUCCESS) ledger_remove(r_device, dptr);",
           "if (call.tracked() && r == CUDA_SUCCESS) ledger_remove(r_pinned, dptr);",
           r"^interpose_tests\.host$", "cuMemFree's release filed as a pinned release"),
    Mutant("interpose.unmap_as_release", "interpose/src/interpose.cpp",
           "ledger_remove_range(r_mapping, ptr, size);",
           "ledger_remove_range(r_physical_handle, ptr, size);",
           r"^interpose_tests\.host$", "cuMemUnmap filed as the release of a physical handle"),
    Mutant("interpose.release_untracked_not_counted", "interpose/src/interpose.cpp",
           "  if (at == ledger_capacity) {\n    ++totals.untracked_releases;",
           "  if (at == ledger_capacity) {\n    (void)totals.untracked_releases;",
           r"^interpose_tests\.host$", "a release of what the ledger never saw is not counted"),
    Mutant("interpose.free_host_as_device_runtime", "interpose/src/interpose.cpp",
           "if (call.tracked() && r == cudaSuccess) ledger_remove(r_pinned, as_key(p));",
           "if (call.tracked() && r == cudaSuccess) ledger_remove(r_device, as_key(p));",
           r"^interpose_tests\.host$", "cudaFreeHost's release filed as a device release"),
    Mutant("interpose.host_alloc_as_device_runtime", "interpose/src/interpose.cpp",
           "  if (call.tracked() && r == cudaSuccess && pHost != nullptr) {\n"
           "    ledger_add(r_pinned, as_key(*pHost), size);",
           "  if (call.tracked() && r == cudaSuccess && pHost != nullptr) {\n"
           "    ledger_add(r_device, as_key(*pHost), size);",
           r"^interpose_tests\.host$", "cudaHostAlloc's pinned memory filed as device memory"),
    # ---- the driver-fault countdown: each case's class, the framework's caches, shutdowns --------
    Mutant("countdown.failed_retry_clean", "interpose/src/countdown.cpp",
           "  if (s.retried && !s.retry_ok) {",
           "  if (s.retried && s.retry_ok) {",
           INTERPOSE, "a retry that failed classed clean, one that worked classed retry failed"),
    Mutant("countdown.untyped_error_clean", "interpose/src/countdown.cpp",
           "  if (!s.consistent || !s.typed_error) {",
           "  if (!s.consistent) {",
           INTERPOSE, "an error that is not one of offloadkit's typed errors classed clean"),
    Mutant("countdown.close_failure_dropped", "interpose/src/countdown.cpp",
           "  if (!s.close_error.empty()) out.push_back({fault_class::close_failed, s.close_error});",
           "  (void)s.close_error;",
           INTERPOSE, "a close that failed after the fault reported nowhere"),
    Mutant("countdown.data_loss_after_retry", "interpose/src/countdown.cpp",
           "  if (!s.data_ok) out.push_back({fault_class::data_lost, join(s.problems, \"; \")});\n"
           "  if (s.retried && !s.retry_ok) {\n"
           "    out.push_back(\n"
           "        {fault_class::retry_failed, s.error + where + \"; the retry failed: \" + "
           "s.retry_error});\n  }",
           "  if (s.retried && !s.retry_ok) {\n"
           "    out.push_back(\n"
           "        {fault_class::retry_failed, s.error + where + \"; the retry failed: \" + "
           "s.retry_error});\n  }\n"
           "  if (!s.data_ok) out.push_back({fault_class::data_lost, join(s.problems, \"; \")});",
           INTERPOSE, "a case that lost data and failed its retry classed by the retry, not the "
           "data loss"),
    Mutant("countdown.framework_cache_unnoted", "interpose/src/countdown.cpp",
           "  if (!run.scenario || run.scenario->framework_cache.empty()) return;",
           "  return;",
           INTERPOSE, "what a framework's caches gave back before the ledger was read left out "
           "of the case's row"),
    Mutant("bridge.pinned_cache_kept", "python/offloadkit/_bridge.py",
           "            host_empty()\n",
           "",
           r"^python_package\.unit$", "PyTorch's pinned host cache not emptied before the "
           "ledger is read (its blocks would count as the implementation's leak)"),
    Mutant("countdown.shutdown_is_the_class", "interpose/src/countdown.cpp",
           "  switch (row.shutdown.empty() ? run.process.end : process_end::how::exited) {",
           "  switch (run.process.end) {",
           INTERPOSE, "a crash or hang after the case's result made the case's class, not its "
           "shutdown"),
    Mutant("countdown.grace_as_time_limit", "interpose/src/countdown.cpp",
           "      return p.past_grace\n",
           "      return !p.past_grace\n",
           INTERPOSE, "a process killed past the shutdown grace said to be stopped at the time "
           "limit, and the other way round"),
    # ---- offloadkit check: its exit status, its shutdown findings and its reports ---------------
    Mutant("check.shutdown_exit_zero", "tools/check_cli.cpp",
           "  return failed == 0 && shutdown.empty() ? exit_status::ok : exit_status::check_failed;",
           "  return failed == 0 ? exit_status::ok : exit_status::check_failed;",
           r"^offloadkit_check\.(isolation|report_isolation)$", "a run whose only finding is a "
           "crash at exit after the results ends with exit status 0"),
    Mutant("report.not_applicable_as_skipped", "tools/report.cpp",
           "    } else if (o.not_applicable) {\n      ++c.not_applicable;",
           "    } else if (o.not_applicable) {\n      ++c.skipped;",
           r"^report_test\.host$", "a report counts a property ruled out by the profile as "
           "skipped"),
    Mutant("report.not_applicable_verdict", "tools/report.cpp",
           '  if (o.not_applicable) return "not applicable";',
           '  if (o.not_applicable) return "holds";',
           r"^report_test\.host$", "a report's verdict of a property ruled out by the profile "
           "is holds"),
    Mutant("report.markdown_failure_not_marked", "tools/report_markdown.cpp",
           'failed ? "**" + md_cell(verdict) + "**" : md_cell(verdict), cases_text(row),',
           'md_cell(verdict), cases_text(row),',
           r"^report_test\.host$", "the Markdown report's failing verdicts not in bold"),
    Mutant("report.json_skipped_count", "tools/report_json.cpp",
           '{"skipped", c.skipped},',
           '{"skipped", c.not_applicable},',
           r"^report_test\.host$", "the JSON report's count of skipped properties is the "
           "not-applicable count"),
    Mutant("report.html_verdict_colour", "tools/report_html.cpp",
           "    std::string css = verdict;\n",
           "    std::string css = \"holds\";\n",
           r"^report_test\.host$", "the HTML report colours every verdict as holding"),
    Mutant("report.html_message_unescaped", "tools/report_html.cpp",
           'os << "</ul>\\n<pre>" << html(o.message) << "</pre>\\n";',
           'os << "</ul>\\n<pre>" << o.message << "</pre>\\n";',
           r"^report_test\.host$", "the HTML report writes a failure's message unescaped (its "
           "markup becomes the page's)"),
    # ---- offloadkit conformance: the matrix it writes -----------------------------------------
    Mutant("conformance.failure_not_linked", "tools/conformance.cpp",
           '        const bool fails = c != nullptr && c->verdict == "fails";',
           '        const bool fails = false;',
           r"^offloadkit_conformance\.(complete|committed_matrix)$", "the Markdown matrix's "
           "failing cells neither bold nor linked to their evidence"),
    Mutant("conformance.not_run_reason_dropped", "tools/conformance.cpp",
           '         << md_cell(lib.not_run) << "\\n";',
           '         << "\\n";',
           r"^offloadkit_conformance\.not_run$", "a library not run here listed without the "
           "reason"),
    Mutant("conformance.verdict_counts", "tools/conformance.cpp",
           '      fails += c.verdict == "fails" ? 1 : 0;',
           '      fails += c.verdict == "holds" ? 1 : 0;',
           r"^offloadkit_conformance\.committed_matrix$", "a library's count of failing "
           "properties is its count of holding ones"),
    Mutant("conformance.html_cell_colour", "tools/conformance.cpp",
           '  if (c->verdict == "fails" || c->verdict == "holds" ||',
           '  if (c->verdict == "holds" ||',
           r"^offloadkit_conformance\.(complete_html|intermittent_html)$", "the HTML matrix "
           "colours a failing cell as unknown"),
    # ---- the benchmark harness: the ratio users read --------------------------------------------
    Mutant("bench.ratio_inverted", "bench/harness.hpp",
           "return limit > 0 ? figure / limit : 0; }",
           "return limit > 0 ? limit / figure : 0; }",
           r"^bench_harness_test\.host$", "a figure divided into its limit, not by it",
           targets=("bench_harness_test",)),
    Mutant("bench.limit_direction", "bench/harness.cpp",
           "    if (to_host) {\n      ex.copy(host.data(), dev.data(), bytes, s);",
           "    if (!to_host) {\n      ex.copy(host.data(), dev.data(), bytes, s);",
           r"^bench_harness_test\.host$", "the D2H limit measured with H2D copies and the other "
           "way round",
           targets=("bench_harness_test",)),
    Mutant("bench.json_bad_bytes", "bench/harness.cpp",
           "doc.dump(2, ' ', false, json::error_handler_t::replace)",
           "doc.dump(2, ' ', false, json::error_handler_t::ignore)",
           r"^bench_harness_test\.host$", "bytes that are not UTF-8 (in a command line, say) "
           "dropped from the JSON instead of replaced with a mark",
           targets=("bench_harness_test",)),
    Mutant("bench_peers.of_limit_inverted", "bench/peers/peers_measure.py",
           '"of_limit": limit_s / time_s if time_s > 0 else 0.0,',
           '"of_limit": time_s / limit_s if limit_s > 0 else 0.0,',
           r"^bench_peers\.standins$", "a peer's fraction of the limit inverted"),
)


def fail(message: str, status: int) -> "NoReturn":  # noqa: F821 (typing only)
    sys.stderr.write(f"{PROG}: {message}\n")
    sys.exit(status)


def parse(argv: List[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__[__doc__.index("Exit status:"):])
    p.add_argument("--build", metavar="DIR", default=os.path.join(ROOT, "build"),
                   help="a configured CPU build folder (default: build)")
    p.add_argument("--only", metavar="ID", action="append",
                   help="only this mutant (repeatable; --list names them)")
    p.add_argument("--list", action="store_true", help="list the mutants and exit")
    p.add_argument("--check", action="store_true",
                   help="only check that every mutant's snippet occurs exactly once (the list "
                        "is not stale), and exit")
    p.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    p.add_argument("--timeout", metavar="S", type=int, default=600,
                   help="a mutant's ctest time limit in seconds, 1..7200 (default 600)")
    o = p.parse_args(argv)
    ids = [m.id for m in MUTANTS]
    for i in o.only or []:
        if i not in ids:
            p.error(f"--only: {i} is not one of the mutants: {', '.join(ids)}")
    if not 1 <= o.timeout <= 7200:
        p.error(f"--timeout: {o.timeout} is out of range: valid range 1..7200")
    return o


def build(build_dir: str, targets: tuple = ()) -> subprocess.CompletedProcess:
    """Brings the build folder up to date: the named targets only, or everything."""
    command = ["cmake", "--build", build_dir] + (["--target", *targets] if targets else [])
    return subprocess.run(command, capture_output=True, text=True)


def failed_tests(output: str) -> List[str]:
    """The names ctest lists under "The following tests FAILED"."""
    tail = output.split("The following tests FAILED:", 1)
    if len(tail) < 2:
        return []
    return re.findall(r"^\s*\d+ - (\S+)", tail[1], flags=re.M)


class Restorer:
    """Puts a mutated file back, on return and on SIGINT / SIGTERM."""

    def __init__(self) -> None:
        self.saved: Optional[tuple] = None
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._signal)

    def mutate(self, path: str, text: str, mutated: str) -> None:
        self.saved = (path, text)
        with open(path, "w", encoding="utf-8") as f:
            f.write(mutated)

    def restore(self) -> None:
        if self.saved is not None:
            path, text = self.saved
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
            self.saved = None

    def _signal(self, signum: int, _frame) -> None:
        self.restore()
        sys.stderr.write(f"{PROG}: interrupted by signal {signum}: the source is restored; "
                         f"rebuild the build folder\n")
        sys.exit(128 + signum)


def run_one(m: Mutant, o: argparse.Namespace, restorer: Restorer) -> Dict[str, object]:
    path = os.path.join(ROOT, m.path)
    with open(path, encoding="utf-8") as f:
        text = f.read()
    started = time.monotonic()
    result: Dict[str, object] = {"id": m.id, "path": m.path, "what": m.what, "tests": m.tests}
    try:
        restorer.mutate(path, text, text.replace(m.old, m.new, 1))
        built = build(o.build, m.targets)
        if built.returncode != 0:
            result.update(outcome="killed", by="the build")
        else:
            try:
                ran = subprocess.run(["ctest", "--test-dir", o.build, "-R", m.tests, "-j2",
                                      "--timeout", str(o.timeout)],
                                     capture_output=True, text=True, timeout=o.timeout + 60)
                output = ran.stdout + ran.stderr
                selected = re.search(r"tests passed, (\d+) tests failed out of (\d+)", output)
                if selected is None or selected.group(2) == "0":
                    result.update(outcome="error", by=f"no test matches {m.tests!r}")
                elif ran.returncode == 0:
                    result.update(outcome="survived" if not m.survives else "explained",
                                  by=m.survives or f"{selected.group(2)} tests passed")
                else:
                    result.update(outcome="killed",
                                  by=", ".join(failed_tests(output)) or "ctest failed")
            except subprocess.TimeoutExpired:
                result.update(outcome="killed", by=f"ctest ran past {o.timeout + 60} s")
    finally:
        restorer.restore()
    result["seconds"] = round(time.monotonic() - started, 1)
    return result


def main(argv: List[str]) -> int:
    o = parse(argv)
    selected = [m for m in MUTANTS if not o.only or m.id in o.only]
    if o.list:
        for m in selected:
            print(f"{m.id:<44} {m.path}: {m.what} (tests: {m.tests})")
        return 0
    for m in selected:
        path = os.path.join(ROOT, m.path)
        with open(path, encoding="utf-8") as f:
            found = f.read().count(m.old)
        if found != 1:
            fail(f"{m.id}: its snippet occurs {found} times in {m.path}, not once: the list is "
                 f"stale", 2)
    if o.check:
        print(f"{len(selected)} mutants, each snippet found exactly once")
        return 0
    if not os.path.isfile(os.path.join(o.build, "CMakeCache.txt")):
        fail(f"--build: {o.build} is not a configured build folder (cmake -S . -B {o.build})", 3)
    dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--"] +
                           sorted({m.path for m in selected}), capture_output=True, text=True)
    if dirty.stdout.strip():
        fail("uncommitted changes in files a mutant changes (commit or stash them first, so "
             f"that nothing is lost):\n{dirty.stdout}", 2)
    if build(o.build).returncode != 0:
        fail(f"the build in {o.build} fails without any mutant", 3)
    restorer = Restorer()
    results = []
    for n, m in enumerate(selected, 1):
        print(f"[{n}/{len(selected)}] {m.id}: {m.what} ...", end="", flush=True)
        r = run_one(m, o, restorer)
        results.append(r)
        print(f" {r['outcome']}: {r['by']} ({r['seconds']} s)", flush=True)
    build(o.build)
    reinstalled = True
    if any(m.path.startswith("python/") for m in selected):
        reinstalled = subprocess.run(["ctest", "--test-dir", o.build, "-R", PIP_INSTALL],
                                     capture_output=True, text=True).returncode == 0
        print("the test virtual environment's offloadkit installed again from the unmutated "
              f"sources (ctest -R '{PIP_INSTALL}'): "
              f"{'done' if reinstalled else 'FAILED: run that test again'}")
    survivors = [r for r in results if r["outcome"] in ("survived", "error")]
    counts = {k: sum(r["outcome"] == k for r in results)
              for k in ("killed", "explained", "survived", "error")}
    print(f"{len(results)} mutants: {counts['killed']} killed, {counts['explained']} explained, "
          f"{counts['survived']} survived, {counts['error']} with no test")
    for r in survivors:
        print(f"  SURVIVED {r['id']} ({r['path']}): {r['what']}; {r['by']}")
    if o.json:
        with open(o.json, "w", encoding="utf-8") as f:
            json.dump({"mutants": results, "counts": counts}, f, indent=2)
            f.write("\n")
    if survivors:
        return 1
    return 0 if reinstalled else 3


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
