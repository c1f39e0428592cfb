"""bench_peers's whole measuring path over the library stand-ins of python/tests/adapters/standins
(no GPU, no PyTorch): every peer is driven through its adapter, each pause, resume, pack and unpack
moves exactly the bytes it should, every row the program prints and writes is well formed, and
offloadkit's rows are merged from its benchmarks' JSON with the right speed-ups. Timings here are
the host's and mean nothing; no test reads them.

The stand-ins' device memory is ``HostMemory`` (standin_memory.py): host memory (ctypes buffers)
that counts the bytes every copy moves in each direction, and loses the contents of a range when it
is unmapped, as releasing physical memory does. MeasuringPathTest runs every peer in this process
(--in-process), so that it can count each call's bytes; ProcessPerPeerTest runs the default way,
each peer in a process of its own (standin_worker.py binds the stand-ins there), with planted
peers that corrupt bytes, crash, go wrong at exit or leave process-global state behind.

    PYTHONPATH=python python3 -m unittest discover -s bench/peers/tests -p "test_*.py"
"""

import contextlib
import ctypes
import io
import json
import os
import stat
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
STANDINS = os.path.join(ROOT, "python", "tests", "adapters", "standins")
for path in (os.path.dirname(HERE), STANDINS):
    if path not in sys.path:
        sys.path.insert(0, path)

import torch  # noqa: E402 (the stand-in)

import bench_peers  # noqa: E402
import peers_measure  # noqa: E402
import standin_offloadkit  # noqa: E402
from offloadkit import hooks  # noqa: E402
from standin_memory import HostMemory  # noqa: E402
from offloadkit.adapters import torch_memory_saver as tms_adapter  # noqa: E402
from offloadkit.adapters import vllm as vllm_adapter  # noqa: E402

assert torch.__version__.endswith("offloadkit.standin"), torch.__file__
MIB = 1 << 20
REPS = 2
BLOCKS, HIDDEN, TOKENS = 2, 64, 32


class Calls:
    """Records each call of the peers' adapter methods with the bytes it moved each way."""

    def __init__(self, memory):
        self.memory = memory
        self.log = []  # (class name, method, nbytes argument, d2h moved, h2d moved)
        self.saved = []

    def wrap(self, cls, name):
        original = getattr(cls, name)
        memory, log = self.memory, self.log

        def call(obj, *args, **kwargs):
            before = dict(memory.moved)
            result = original(obj, *args, **kwargs)
            nbytes = getattr(args[0], "nbytes", None) if args else None
            log.append((getattr(obj, "implementation", type(obj).__name__), name, nbytes,
                        memory.moved["d2h"] - before["d2h"], memory.moved["h2d"] - before["h2d"]))
            return result

        self.saved.append((cls, name, original))
        setattr(cls, name, call)

    def restore(self):
        for cls, name, original in reversed(self.saved):
            setattr(cls, name, original)

    def of(self, implementation, name):
        return [entry for entry in self.log if entry[0] == implementation and entry[1] == name]


FAKE_REGION = """#!{python}
import json, sys
a = sys.argv
path, low, high = a[a.index("--json") + 1], int(a[a.index("--min-mib") + 1]), \\
    int(a[a.index("--max-mib") + 1])
rows, m = [], low
while m <= high:
    rows.append({{"bytes": m << 20, "d2h_s": 1.0, "h2d_s": 1.0, "pause_s": 2.0, "resume_s": 4.0,
                 "both_directions_s": 3.0, "swap_s": 4.0, "wrong": 0}})
    m *= 2
json.dump({{"benchmark": "region", "executor": "host", "rows": rows}}, open(path, "w"))
"""
FAKE_MLP = """#!{python}
import json, sys
a = sys.argv
h, t = (int(x) for x in a[a.index("--shape") + 1].split("x"))
phase = {{"none_s": 0.5, "floor_s": 1.0, "offload_s": 1.25, "ratio": 1.25}}
json.dump({{"benchmark": "activation_mlp", "rows": [{{"h": h, "tokens": t, "saved_bytes": 1000,
          "forward": phase, "backward": phase, "wrong": 0}}]}}, open(a[a.index("--json") + 1], "w"))
"""


class MeasuringPathTest(unittest.TestCase):
    """One run of the whole program over the stand-ins, its calls recorded; each test reads it."""

    @classmethod
    def setUpClass(cls):
        cls.memory = HostMemory()
        torch._standin_bind(cls.memory)
        cls.calls = Calls(cls.memory)
        for region in (tms_adapter.TorchMemorySaverRegion, vllm_adapter.CuMemAllocatorRegion):
            for name in ("pause", "resume"):
                cls.calls.wrap(region, name)
        for name in ("pack", "unpack"):
            cls.calls.wrap(hooks._HooksActivation, name)
        cls.tmp = tempfile.TemporaryDirectory()
        programs = []
        for name, text in (("bench_region", FAKE_REGION), ("bench_activation_mlp", FAKE_MLP)):
            path = os.path.join(cls.tmp.name, name)
            with open(path, "w") as f:
                f.write(text.format(python=sys.executable))
            os.chmod(path, stat.S_IRWXU)
            programs.append(path)
        cls.json_path = os.path.join(cls.tmp.name, "peers.json")
        out, err = io.StringIO(), io.StringIO()
        # offloadkit's own rows through a stand-in of offloadkit.optimized (no extension module,
        # no GPU here), with its swap_with.
        tables = bench_peers.REGION_PEERS, bench_peers.ACTIVATION_PEERS
        standin = (bench_peers.OFFLOADKIT, "standin_offloadkit:make")
        bench_peers.REGION_PEERS = (standin,) + tables[0][1:]
        bench_peers.ACTIVATION_PEERS = (standin,) + tables[1][1:]
        standin_offloadkit.SwapRegion.swaps = 0
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                cls.status = bench_peers.main([
                    "--min-mib", "1", "--max-mib", "2", "--reps", str(REPS), "--blocks",
                    str(BLOCKS), "--shape", f"{HIDDEN}x{TOKENS}", "--bench-region", programs[0],
                    "--bench-activation-mlp", programs[1], "--offloadkit-executor", "host",
                    "--json", cls.json_path, "--in-process"])
        finally:
            cls.calls.restore()
            bench_peers.REGION_PEERS, bench_peers.ACTIVATION_PEERS = tables
        cls.stdout, cls.stderr = out.getvalue(), err.getvalue()
        with open(cls.json_path) as f:
            cls.doc = json.load(f)
        cls.rows = cls.doc["rows"]

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def rows_of(self, implementation, operation=None):
        return [r for r in self.rows if r["implementation"] == implementation and
                (operation is None or r["operation"] == operation)]

    def test_the_run_succeeds_and_every_peer_row_is_measured(self):
        self.assertEqual(self.status, 0, self.stdout + self.stderr)
        for r in self.rows:
            if r["implementation"] == "megatron-paged-stash":
                continue
            if r["implementation"] == "vllm-cumem" and r["operation"] == "phase switch":
                continue
            self.assertEqual(r["status"], "ok", r)
        self.assertIn("bench_peers: region torch_memory_saver 1 MiB", self.stderr)

    def test_region_peers_pause_and_resume_move_the_region_each_way(self):
        for impl in ("torch_memory_saver", "vllm-cumem"):
            for name, way in (("pause", 3), ("resume", 4)):
                calls = self.calls.of(impl, name)
                # Both tms rows (defaults and retain) and offloadkit's stand-in (standin_offloadkit,
                # whose swaps pause and resume) have the implementation torch_memory_saver.
                runs = 3 if impl == "torch_memory_saver" else 1
                for nbytes in (1 * MIB, 2 * MIB):
                    moved = [c for c in calls if c[way] == nbytes]
                    per_size = (1 + REPS) + (2 + REPS) if impl == "torch_memory_saver" else \
                        (1 + REPS)
                    self.assertEqual(len(moved), runs * per_size, (impl, name, nbytes, calls))
                self.assertTrue(all(c[way] in (MIB, 2 * MIB) for c in calls), calls)

    def test_region_rows_count_the_calls_the_adapters_saw(self):
        for impl in ("torch_memory_saver", "torch_memory_saver-retain", "vllm-cumem"):
            for r in self.rows_of(impl):
                if r["status"] != "ok":
                    continue
                expected = 1 + REPS if r["operation"] != "phase switch" else 2 + REPS
                self.assertEqual((r["calls"]["pause"], r["calls"]["resume"]),
                                 (expected, expected), r)
                self.assertEqual(r["wrong"], 0, r)

    def test_vllm_phase_switch_is_skipped_with_the_adapters_reason(self):
        for r in self.rows_of("vllm-cumem", "phase switch"):
            self.assertEqual(r["status"], "skipped")
            self.assertIn("a second region while", r["reason"])

    def test_activation_peers_move_every_saved_tensor_each_way(self):
        sizes = [TOKENS * HIDDEN * 2, TOKENS * 4 * HIDDEN * 2, TOKENS * 4 * HIDDEN * 2]
        steps = 1 + REPS + 1  # warm-up, timed rounds, the checked step
        streams = 2  # a side stream, then the default stream
        for impl in ("torchtune-offload", "trl-offload", "torch-save-on-cpu",
                     "megatron-fine-grained-offload"):
            packs, unpacks = self.calls.of(impl, "pack"), self.calls.of(impl, "unpack")
            # offloadkit's stand-in is TRL's adapter too (standin_offloadkit).
            runs = (2 if impl == "trl-offload" else 1) * streams
            self.assertEqual(len(packs), runs * steps * BLOCKS * 3, impl)
            self.assertEqual(len(unpacks), runs * steps * BLOCKS * 3, impl)
            self.assertEqual(sorted(c[2] for c in packs), sorted(sizes * BLOCKS * steps * runs))
            if impl == "megatron-fine-grained-offload":
                # Megatron copies a layer's tensors at its group's commit (forward_layer_end) and
                # reloads them at the next backward group, not in pack and unpack; and these
                # tensors are under its threshold (min_offloaded_tensor_size, 1048576 elements),
                # so it keeps them on the device.
                self.assertEqual(sum(c[3] + c[4] for c in packs + unpacks), 0, unpacks)
                continue
            for c in packs:
                self.assertEqual(c[3], c[2], (impl, c))  # d2h moved = the tensor's bytes
            self.assertTrue(all(c[4] == n for c, n in zip(
                unpacks, [sizes[j] for _ in range(steps * BLOCKS) for j in (2, 1, 0)])),
                (impl, unpacks))
        for name in ("torchtune", "trl", "torch-save-on-cpu", "megatron-fine-grained"):
            self.assertEqual([(r["operation"], r["stream"]) for r in self.rows_of(name)],
                             [("forward", "side"), ("backward", "side"),
                              ("forward", "default"), ("backward", "default")])
            for r in self.rows_of(name):
                self.assertEqual(r["bytes"], sum(sizes) * BLOCKS)
                self.assertEqual(r["calls"]["pack"], steps * BLOCKS * 3, r)
                self.assertEqual(r["calls"]["unpack"], steps * BLOCKS * 3, r)
                self.assertEqual(r["wrong"], 0, r)

    def test_every_row_is_well_formed(self):
        expected = {("region", op) for op in ("pause", "resume", "phase switch")} | {
            ("activation", "forward"), ("activation", "backward")}
        seen = set()
        for r in self.rows:
            self.assertIn(r["status"], ("ok", "skipped"), r)
            if r["status"] == "skipped":
                self.assertTrue(r["reason"], r)
                continue
            seen.add((r["feature"], r["operation"]))
            self.assertGreater(r["time_s"], 0, r)
            self.assertGreater(r["limit_s"], 0, r)
            self.assertAlmostEqual(r["of_limit"], r["limit_s"] / r["time_s"])
        self.assertEqual(seen, expected)
        peers = {r["implementation"] for r in self.rows}
        self.assertEqual(peers, {"offloadkit", "offloadkit-c++", "torch_memory_saver",
                                 "torch_memory_saver-retain",
                                 "vllm-cumem", "torchtune", "trl", "torch-save-on-cpu",
                                 "megatron-fine-grained",
                                 "megatron-paged-stash"})
        megatron = self.rows_of("megatron-paged-stash")[0]
        self.assertIn("not timed here", megatron["reason"])
        self.assertIn("offloadkit.adapters.megatron_paged_stash", megatron["reason"])
        # Region: 3 operations x 2 sizes x 5 implementations (offloadkit's C++ benchmark among
        # them); activation: 2 phases x 2 streams x 5, and 2 of offloadkit's C++ benchmark;
        # Megatron's paged stash.
        self.assertEqual(len(self.rows), 3 * 2 * 5 + 2 * 2 * 5 + 2 + 1)

    def test_cpp_benchmark_rows_come_from_their_json(self):
        ours = {(r["operation"], r.get("bytes"), r.get("hidden")): r
                for r in self.rows_of("offloadkit-c++")}
        self.assertAlmostEqual(ours[("pause", MIB, None)]["of_limit"], 0.5)
        self.assertAlmostEqual(ours[("resume", MIB, None)]["of_limit"], 0.25)
        self.assertAlmostEqual(ours[("phase switch", MIB, None)]["of_limit"], 0.75)
        self.assertAlmostEqual(ours[("forward", 1000, HIDDEN)]["of_limit"], 0.8)
        for r in self.rows_of("offloadkit-c++"):
            self.assertNotIn("offloadkit_speedup", r)
            self.assertNotIn("speedup_over", r)

    def test_offloadkit_phase_switch_is_its_swap(self):
        # Warm-up and the timed rounds of each size swap; the other peers pause, then resume.
        self.assertEqual(standin_offloadkit.SwapRegion.swaps, 2 * REPS)
        for r in self.rows_of("offloadkit", "phase switch"):
            self.assertEqual(r["calls"].get("swap_with"), REPS, r)
            self.assertEqual(r["wrong"], 0, r)

    def test_offloadkit_speedups_over_each_peer(self):
        for r in self.rows:
            if r["implementation"] in ("offloadkit", "offloadkit-c++") or r["status"] != "ok":
                continue
            mine = [o for o in self.rows_of("offloadkit", r["operation"])
                    if (o["feature"] == "region" and o["bytes"] == r["bytes"]) or
                    (o["feature"] == "activation" and o["hidden"] == r["hidden"] and
                     o["stream"] == r["stream"])]
            self.assertEqual(len(mine), 1, r)
            mine = mine[0]
            self.assertAlmostEqual(r["offloadkit_speedup"], mine["of_limit"] / r["of_limit"])
            self.assertAlmostEqual(mine["speedup_over"][r["implementation"]],
                                   r["offloadkit_speedup"])

    def test_the_table_has_one_line_per_row(self):
        lines = [line for line in self.stdout.splitlines() if line.startswith("| ")]
        self.assertEqual(len(lines), 1 + len(self.rows))
        self.assertTrue(lines[0].startswith("| feature | operation |"))
        self.assertIn("| region | pause | 1 MiB | offloadkit-c++ | 2000.00 | 1000.00 | 0.500 |",
                      self.stdout)
        for line in lines[1:]:
            self.assertEqual(line.count(" | "), 9, line)
        self.assertEqual(len([line for line in lines if "| activation | forward | h=64 t=32 (0.00 "
                              "GB), default stream | torchtune |" in line]), 1, self.stdout)



PLANTED = os.path.join(HERE, "planted_peers.py")
WORKER = os.path.join(HERE, "standin_worker.py")
#: Region peers of ProcessPerPeerTest: one the stand-ins measure cleanly, the planted ones.
PLANTED_REGION_PEERS = (
    ("torch_memory_saver", "offloadkit.adapters.torch_memory_saver:make_retain_cpu_backup"),
    ("corrupting", PLANTED + ":corrupting"),
    ("crashing", PLANTED + ":crashing"),
    ("exits_badly", PLANTED + ":exits_badly"),
    ("poisoning", PLANTED + ":poisoning"),
    ("poisoned", PLANTED + ":poisoned"),
)


def run_peers(peers, *extra, feature="region"):
    """bench_peers over `peers` of `feature` (no offloadkit rows; region: 1 MiB; activation: one
    small shape, one block), each peer in a process of its own started through
    standin_worker.py; (exit status, stdout, stderr, rows)."""
    table = "REGION_PEERS" if feature == "region" else "ACTIVATION_PEERS"
    saved = getattr(bench_peers, table), bench_peers.WORKER_COMMAND
    setattr(bench_peers, table, peers)
    bench_peers.WORKER_COMMAND = [sys.executable, WORKER]
    sizes = (["--min-mib", "1", "--max-mib", "1"] if feature == "region" else
             ["--shape", f"{HIDDEN}x{TOKENS}", "--blocks", "1"])
    out, err = io.StringIO(), io.StringIO()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "peers.json")
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                status = bench_peers.main(["--feature", feature, "--no-offloadkit"] + sizes +
                                          ["--reps", "1", "--json", path] + list(extra))
        finally:
            setattr(bench_peers, table, saved[0])
            bench_peers.WORKER_COMMAND = saved[1]
        with open(path) as f:
            rows = json.load(f)["rows"]
    return status, out.getvalue(), err.getvalue(), rows


class ProcessPerPeerTest(unittest.TestCase):
    """The default run: each peer in a process of its own, its rows gathered by the parent."""

    @classmethod
    def setUpClass(cls):
        cls.status, cls.stdout, cls.stderr, cls.rows = run_peers(PLANTED_REGION_PEERS)

    def rows_of(self, name):
        rows = [r for r in self.rows if r["implementation"] == name]
        self.assertEqual([r["operation"] for r in rows], ["pause", "resume", "phase switch"])
        return rows

    def test_the_run_fails_and_counts_the_failed_rows(self):
        self.assertEqual(self.status, 1, self.stdout + self.stderr)
        self.assertRegex(self.stdout,
                         r"\n12 measured, 0 skipped, 6 failed, 0 known-wrong; #wrong [1-9]")

    def test_a_peer_measured_cleanly_is_gathered_from_its_process(self):
        for r in self.rows_of("torch_memory_saver"):
            self.assertEqual(r["status"], "ok", r)
            self.assertEqual(r["wrong"], 0, r)
            self.assertNotIn("shutdown", r)
        self.assertIn("region torch_memory_saver: in a process of its own", self.stderr)

    def test_rows_whose_bytes_come_back_wrong_fail(self):
        for r in self.rows_of("corrupting"):
            self.assertEqual(r["status"], "failed", r)
            self.assertGreater(r["wrong"], 0, r)
            self.assertRegex(r["reason"], r"^contents came back wrong: \d+ of 1048576 byte")
        self.assertRegex(self.stdout, r"\| region \| pause \| 1 MiB \| corrupting \| – \|.*"
                                      r"failed: contents came back wrong")

    def test_a_peer_whose_process_crashes_fails_its_rows_and_the_run_goes_on(self):
        for r in self.rows_of("crashing"):
            self.assertEqual(r["status"], "failed", r)
            self.assertRegex(r["reason"], r"^the peer's process crashed: signal 6 \(SIGABRT\) "
                                          r"before this row: .*planted: aborting in pause")
        for r in self.rows_of("poisoned"):  # a peer after the crash still runs
            self.assertEqual(r["status"], "ok", r)

    def test_a_process_that_goes_wrong_after_its_rows_keeps_them(self):
        for r in self.rows_of("exits_badly"):
            self.assertEqual(r["status"], "ok", r)
            self.assertEqual(r["shutdown"],
                             "its process exited with status 3 after writing its rows")
        self.assertIn("shutdown: exits_badly: its process exited with status 3 after writing its "
                      "rows (its rows stand)", self.stdout)

    def test_process_global_state_of_one_peer_does_not_reach_the_next(self):
        # In one process, the poisoning peer's import-time setting breaks the poisoned peer
        # (as Megatron-LM's import set torch_memory_saver's hook mode): the isolation is real.
        status, out, err, rows = run_peers(
            (PLANTED_REGION_PEERS[4], PLANTED_REGION_PEERS[5]), "--in-process")
        poisoned = [r for r in rows if r["implementation"] == "poisoned"]
        self.assertEqual({r["status"] for r in poisoned}, {"failed"}, poisoned)
        self.assertIn("hook_mode was set to 'torch'", poisoned[0]["reason"])


def run_activation_peers(peers, *extra):
    """run_peers over activation `peers`: (exit status, stdout and stderr, rows)."""
    status, out, err, rows = run_peers(peers, *extra, feature="activation")
    return status, out + err, rows


class KnownWrongTest(unittest.TestCase):
    """A peer that loses data on a side stream only (the shape of torchtune's and TRL's defect):
    its side-stream rows fail, its default-stream rows are measured; --known-wrong turns the
    rows it names into known-wrong ones (the run passes), and fails a named row whose contents
    come back right."""

    PEERS = (("trl", PLANTED + ":corrupting_on_side_stream"),
             ("torchtune", "offloadkit.adapters.torchtune:make_single_stream"))

    def statuses(self, rows, name):
        return {(r["operation"], r["stream"]): r["status"] for r in rows
                if r["implementation"] == name}

    def test_side_stream_rows_lose_data_and_fail_the_run(self):
        status, out, rows = run_activation_peers(self.PEERS)
        self.assertEqual(status, 1, out)
        self.assertEqual(self.statuses(rows, "trl"), {
            ("forward", "side"): "failed", ("backward", "side"): "failed",
            ("forward", "default"): "ok", ("backward", "default"): "ok"})
        self.assertEqual(set(self.statuses(rows, "torchtune").values()), {"ok"}, out)

    def test_known_wrong_rows_do_not_fail_the_run(self):
        status, out, rows = run_activation_peers(self.PEERS, "--known-wrong", "trl:side")
        self.assertEqual(status, 0, out)
        self.assertEqual(self.statuses(rows, "trl"), {
            ("forward", "side"): "known-wrong", ("backward", "side"): "known-wrong",
            ("forward", "default"): "ok", ("backward", "default"): "ok"})
        side = [r for r in rows if r["implementation"] == "trl" and r["stream"] == "side"]
        self.assertGreater(side[0]["wrong"], 0)
        self.assertIn("(a known defect, --known-wrong trl:side)", side[0]["reason"])
        self.assertRegex(out, r"\n6 measured, 0 skipped, 0 failed, 2 known-wrong; #wrong 0\n")

    def test_a_known_wrong_row_that_comes_back_right_fails(self):
        status, out, rows = run_activation_peers(self.PEERS, "--known-wrong",
                                                 "trl:side,torchtune:side")
        self.assertEqual(status, 1, out)
        self.assertEqual(self.statuses(rows, "torchtune")[("forward", "side")], "failed")
        reason = [r["reason"] for r in rows if r["implementation"] == "torchtune" and
                  r["stream"] == "side"][0]
        self.assertEqual(reason, "--known-wrong names torchtune:side, but its contents came "
                                 "back right: the defect is not there (take it off --known-wrong)")
        self.assertEqual(self.statuses(rows, "torchtune")[("forward", "default")], "ok")


class InterruptedTest(unittest.TestCase):
    """SIGTERM (a CI job's time limit) while a peer's process hangs: that process is killed, and
    the table and the JSON keep what was measured, the rest "not measured"."""

    def test_a_stopped_run_keeps_its_rows_and_kills_the_peer_under_way(self):
        import signal
        import subprocess
        import time

        peers = (PLANTED_REGION_PEERS[0], ("hanging", PLANTED + ":hanging"))
        with tempfile.TemporaryDirectory() as tmp:
            path, err_path = os.path.join(tmp, "peers.json"), os.path.join(tmp, "stderr")
            driver = (
                "import sys; sys.path[:0] = [%r, %r]\n"
                "import bench_peers\n"
                "bench_peers.REGION_PEERS = %r\n"
                "bench_peers.WORKER_COMMAND = [sys.executable, %r]\n"
                "sys.exit(bench_peers.main(['--feature', 'region', '--no-offloadkit', "
                "'--min-mib', '1', '--max-mib', '1', '--reps', '1', '--json', %r]))\n"
                % (HERE, os.path.dirname(HERE), peers, WORKER, path))
            pid_file = os.path.join(tmp, "hanging.pid")
            with open(err_path, "w") as err:
                run = subprocess.Popen([sys.executable, "-c", driver], stdout=subprocess.PIPE,
                                       stderr=err, text=True,
                                       env=dict(os.environ, HANGING_PID_FILE=pid_file))

            def said():
                with open(err_path) as f:
                    return f.read()

            deadline = time.monotonic() + 120
            while not os.path.exists(pid_file):  # the peer's process hangs in pause
                self.assertLess(time.monotonic(), deadline, said())
                self.assertIsNone(run.poll(), said())
                time.sleep(0.2)
            with open(pid_file) as f:
                hanging_pid = int(f.read())
            run.send_signal(signal.SIGTERM)
            out, _ = run.communicate(timeout=60)
            err = said()
            with open(path) as f:
                doc = json.load(f)
        self.assertEqual(run.returncode, 128 + signal.SIGTERM, out + err)
        self.assertEqual(doc["interrupted"], "SIGTERM")
        measured = [r for r in doc["rows"] if r["implementation"] == "torch_memory_saver"]
        self.assertEqual([(r["operation"], r["status"]) for r in measured],
                         [("pause", "ok"), ("resume", "ok"), ("phase switch", "ok")])
        hung = [r for r in doc["rows"] if r["implementation"] == "hanging"]
        self.assertEqual([(r["operation"], r["status"], r["reason"]) for r in hung],
                         [(op, "skipped", "not measured: the run was stopped by SIGTERM")
                          for op in ("pause", "resume", "phase switch")])
        self.assertIn("stopped by SIGTERM: the table and --json keep the 3 row(s) measured",
                      err)
        self.assertRegex(out, r"\| region \| pause \| 1 MiB \| torch_memory_saver \| ")
        self.assertRegex(out, r"\ninterrupted: stopped by SIGTERM; the rows not measured say so")
        # The hanging peer's process went with the run, and its output was relayed.
        with self.assertRaises(ProcessLookupError):
            os.kill(hanging_pid, 0)
        self.assertIn("planted: hanging in pause", err)


class WrongBytesTest(unittest.TestCase):
    """Device.wrong counts a region slice by slice (a whole 8 GiB region at once needs more device
    memory than an 80 GB GPU has free): every slice is counted, the last, short one included."""

    def setUp(self):
        self.memory = HostMemory()
        torch._standin_bind(self.memory)
        self.dev = peers_measure.Device(torch)
        self.nbytes = 10 * 1024 + 7
        self.buf = self.memory.allocate(self.nbytes)
        self.dev.fill(self.buf.ptr, self.nbytes, 0x5A)
        self.slice = peers_measure.WRONG_SLICE
        peers_measure.WRONG_SLICE = 4096

    def tearDown(self):
        peers_measure.WRONG_SLICE = self.slice

    def test_bytes_wrong_in_every_slice_are_counted(self):
        self.assertEqual(self.dev.wrong(self.buf.ptr, self.nbytes, 0x5A), 0)
        for at in (0, 4095, 4096, 9000, self.nbytes - 1):  # first, both sides of a seam, last
            ctypes.memset(self.buf.ptr + at, 0, 1)
        self.assertEqual(self.dev.wrong(self.buf.ptr, self.nbytes, 0x5A), 5)
        self.assertEqual(self.dev.wrong(self.buf.ptr, self.nbytes, 0), self.nbytes - 5)


if __name__ == "__main__":
    unittest.main()
