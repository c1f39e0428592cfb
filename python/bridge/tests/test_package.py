"""Unit tests of the offloadkit Python package that need no bridge: the schedule recorder, buffers
and their array interfaces, the errors and how the bridge maps and formats them, and the checks
the bridge applies to a factory's plugin."""

import importlib.util
import json
import os
import sys
import tempfile
import unittest

import offloadkit as ok
from offloadkit import _bridge


class RecorderTest(unittest.TestCase):
    def recorder(self, **kw):
        args = dict(virtual_stages=2, layers=2, microbatches=2, row_bytes=16, max_rows=100,
                    page_rows=8)
        args.update(kw)
        return ok.ScheduleRecorder(**args)

    def forward(self, rec, mb, rows=5):
        for vp in range(rec.virtual_stages):
            for layer in range(rec.layers):
                rec.record_stash(vp, layer, mb, rows=rows)

    def backward(self, rec, mb):
        for vp in reversed(range(rec.virtual_stages)):
            for layer in reversed(range(rec.layers)):
                rec.record_restore(vp, layer, mb)

    def test_complete_chunks_become_f_and_b_entries(self):
        rec = self.recorder()
        self.forward(rec, 0, rows=3)
        self.forward(rec, 1, rows=100)
        self.backward(rec, 0)
        self.backward(rec, 1)
        doc = rec.to_dict()
        self.assertEqual(doc["format"], "offloadkit.schedule")
        self.assertEqual(doc["version"], 1)
        self.assertEqual(doc["steps"][:2], [["F", 0, 0], ["F", 1, 0]])
        self.assertEqual(doc["steps"][-1], ["B", 0, 1])
        self.assertEqual(len(doc["steps"]), 8)
        self.assertEqual(doc["rows"], [3, 100, 3, 100, 3, 100, 3, 100])
        self.assertEqual(doc["row_bytes"], 16)
        self.assertNotIn("pools", doc)

    def test_partial_chunks_become_s_and_r_entries(self):
        rec = self.recorder(virtual_stages=1, microbatches=2, row_bytes=[4, 8])
        rec.record_stash(0, 0, 0, rows=1)
        rec.record_stash(0, 0, 1, rows=2)
        rec.record_stash(0, 1, 0)
        rec.record_stash(0, 1, 1)
        rec.set_rows(0, 1, 0, 7)
        rec.record_restore(0, 1, 0)
        rec.record_restore(0, 1, 1)
        rec.record_restore(0, 0, 1)
        rec.record_restore(0, 0, 0)
        rec.set_pools(3, 2)
        doc = rec.to_dict()
        self.assertEqual(doc["steps"][0], ["S", 0, 0, 0])
        self.assertEqual(doc["row_bytes"], [4, 8])
        self.assertEqual(doc["rows"], [1, 2, 7, 0])
        self.assertEqual(doc["pools"], {"device_pages": 3, "pinned_pages": 2})
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "s.json")
            rec.write(path)
            with open(path, encoding="utf-8") as f:
                self.assertEqual(json.load(f), doc)

    def test_out_of_order_restore_names_the_step(self):
        rec = self.recorder(virtual_stages=1, microbatches=1)
        rec.record_stash(0, 0, 0)
        rec.record_stash(0, 1, 0)
        rec.record_restore(0, 0, 0)
        with self.assertRaises(ok.ScheduleError) as e:
            rec.validate()
        self.assertEqual(e.exception.where, "/steps/2")
        self.assertIn("out of backward (reverse) order", e.exception.reason)

    def test_a_key_never_restored_is_refused(self):
        rec = self.recorder(virtual_stages=1, layers=1, microbatches=1)
        rec.record_stash(0, 0, 0)
        with self.assertRaises(ok.ScheduleError) as e:
            rec.to_dict()
        self.assertEqual(e.exception.where, "/steps")
        self.assertIn("never restored", str(e.exception))

    def test_ranges_are_checked_with_the_bad_value_and_the_range(self):
        rec = self.recorder()
        with self.assertRaisesRegex(ok.OutOfRange, r"layer = 2 is outside \[0, 2\)"):
            rec.record_stash(0, 2, 0)
        with self.assertRaisesRegex(ok.OutOfRange, r"rows = 101 is outside \[0, max_rows = 100\]"):
            rec.record_stash(0, 0, 0, rows=101)
        with self.assertRaisesRegex(ok.ScheduleError, r"/pipeline/virtual_stages: 65 is outside"):
            self.recorder(virtual_stages=65)
        # The limits of offloadkit replay: files the recorder writes are files replay accepts.
        with self.assertRaisesRegex(ok.ScheduleError, r"/pipeline/microbatches: 4097 is outside"):
            self.recorder(microbatches=4097)
        with self.assertRaisesRegex(ok.ScheduleError, r"/max_rows: -1 is outside"):
            self.recorder(max_rows=-1)
        with self.assertRaisesRegex(ok.ScheduleError, r"/pools: device_pages \+ pinned_pages"):
            self.recorder(device_pages=(1 << 31) - 1, pinned_pages=1)
        with self.assertRaisesRegex(ok.ScheduleError, r"/pools/device_pages: 1099511627776"):
            self.recorder(device_pages=1 << 40)
        with self.assertRaisesRegex(ok.ScheduleError, r"/name: is 4097 bytes long; at most 4096"):
            self.recorder(name="x" * 4097)


class FakeCount:
    """Device row counts as the recorder sees them (an integer CUDA tensor)."""

    is_cuda = True

    def __init__(self, *values):
        self.values = list(values)

    def numel(self):
        return len(self.values)


class FakeRing:
    """A ring whose copies land only when told to (as copies on a busy stream would)."""

    def __init__(self):
        self.slots, self.queued = {}, []

    def put(self, slot, rows):
        for i, v in enumerate(rows.values):
            self.slots[slot + i] = -1
            self.queued.append((slot + i, v))

    def land(self):
        for slot, value in self.queued:
            self.slots[slot] = value
        self.queued = []

    def get(self, slot):
        return self.slots[slot]


class DeviceRowsRecorderTest(unittest.TestCase):
    def recorder(self, marks, ring, **kw):
        args = dict(virtual_stages=1, layers=2, microbatches=1, row_bytes=[16, 32], max_rows=100,
                    page_rows=8, name="a step", nvtx=marks.append, ring=ring)
        args.update(kw)
        return ok.ScheduleRecorder(**args)

    def test_counts_resolve_in_order_and_their_marks_follow_the_convention(self):
        marks, ring = [], FakeRing()
        rec = self.recorder(marks, ring, device_pages=4)
        rec.record_stash(0, 0, 0, rows=FakeCount(7))
        rec.record_stash(0, 1, 0, rows=3)
        rec.record_restore(0, 1, 0)
        rec.record_restore(0, 0, 0)
        self.assertEqual(rec.pending, 5)
        self.assertEqual(marks, [], "nothing is written before resolve()")
        ring.land()
        self.assertEqual(rec.resolve(), 5)
        self.assertEqual(marks, [
            "offloadkit.schedule version=1 pipeline_size=1 pipeline_rank=0 virtual_stages=1 "
            "layers=2 microbatches=1 max_rows=100 page_rows=8 row_bytes=16,32 name=a step",
            "offloadkit.pools device_pages=4 pinned_pages=0",
            "offloadkit.stash vp=0 layer=0 mb=0 rows=7",
            "offloadkit.stash vp=0 layer=1 mb=0 rows=3",
            "offloadkit.restore vp=0 layer=1 mb=0",
            "offloadkit.restore vp=0 layer=0 mb=0"])
        self.assertEqual(rec.to_dict()["rows"], [7, 3])

    def test_resolve_before_the_copy_landed_is_refused_and_loses_nothing(self):
        marks, ring = [], FakeRing()
        rec = self.recorder(marks, ring)
        rec.record_stash(0, 0, 0, rows=2)
        rec.record_stash(0, 1, 0, rows=FakeCount(9))
        rec.record_restore(0, 1, 0)
        with self.assertRaisesRegex(ok.StateError, r"key \(0, 1, 0\) has not reached the host"):
            rec.resolve()
        self.assertEqual(rec.pending, 2)
        with self.assertRaises(ok.StateError):
            rec.write(os.devnull)  # write resolves first, and the count is still in flight
        ring.land()
        rec.record_restore(0, 0, 0)
        self.assertEqual(rec.resolve(), 3)
        self.assertEqual(rec.to_dict()["rows"], [2, 9])

    def test_a_full_ring_is_a_state_error_and_slots_come_back(self):
        ring = FakeRing()
        rec = self.recorder([], ring, ring_slots=1, microbatches=2)
        rec.record_stash(0, 0, 0, rows=FakeCount(1))
        with self.assertRaisesRegex(ok.StateError, "1 row-count slots cannot take 1 more"):
            rec.record_stash(0, 1, 0, rows=FakeCount(1))
        ring.land()
        rec.resolve()
        rec.record_stash(0, 1, 0, rows=FakeCount(5))
        ring.land()
        self.assertEqual(rec.resolve(), 1)
        with self.assertRaises(ok.ScheduleError):
            ok.ScheduleRecorder(virtual_stages=1, layers=1, microbatches=1, row_bytes=1,
                                max_rows=1, ring_slots=0)

    def test_a_layers_counts_go_in_one_copy(self):
        marks, ring = [], FakeRing()
        rec = self.recorder(marks, ring, layers=4, row_bytes=16)
        rec.record_stashes(0, 0, 0, FakeCount(4, 0, 9, 1))
        self.assertEqual(len(ring.queued), 4)
        with self.assertRaises(ok.OutOfRange):  # keys 3..6 would leave the 4 layers
            rec.record_stashes(0, 3, 0, FakeCount(1, 1, 1, 1))
        with self.assertRaises(ok.OutOfRange):
            rec.record_stash(0, 0, 0, rows=FakeCount(1, 2))
        for layer in reversed(range(4)):
            rec.record_restore(0, layer, 0)
        ring.land()
        rec.resolve()
        self.assertEqual(rec.to_dict()["rows"], [4, 0, 9, 1])
        self.assertEqual(marks[1:3], ["offloadkit.stash vp=0 layer=0 mb=0 rows=4",
                                      "offloadkit.stash vp=0 layer=1 mb=0 rows=0"])

    def test_the_marks_turn_back_into_the_recorders_file(self):
        cli = os.environ.get("OFFLOADKIT_CLI")
        if not cli:
            self.skipTest("OFFLOADKIT_CLI (the offloadkit command) is not set")
        marks, ring = [], FakeRing()
        rec = self.recorder(marks, ring, microbatches=2, pipeline_size=2, pipeline_rank=1,
                            device_pages=3, pinned_pages=5)
        for mb in range(2):
            for layer in range(2):
                rec.record_stash(0, layer, mb, rows=FakeCount(10 * mb + layer + 1))
        for mb in range(2):
            for layer in reversed(range(2)):
                rec.record_restore(0, layer, mb)
        ring.land()
        rec.resolve()
        # The marks as `offloadkit capture` writes them: range records of no length, default
        # domain (torch.cuda.nvtx.mark has no domain).
        events = [{"name": m, "ph": "X", "ts": i, "dur": 0, "pid": 0, "tid": 1,
                   "args": {"kind": "range", "start_ns": i, "end_ns": i, "device": -1,
                            "stream": -1, "thread": 1, "bytes": 0, "direction": "unknown",
                            "src": "unknown", "dst": "unknown", "sync": "unknown",
                            "api": "other"}} for i, m in enumerate(marks)]
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "t.json"), "w", encoding="utf-8") as f:
                json.dump({"traceEvents": events}, f)
            import subprocess
            subprocess.run([cli, "schedule-from-trace", os.path.join(d, "t.json"), "-o",
                            os.path.join(d, "s.json")], check=True, capture_output=True)
            with open(os.path.join(d, "s.json"), encoding="utf-8") as f:
                from_trace = json.load(f)
        from offloadkit.schedule import expanded

        self.assertEqual(expanded(from_trace), expanded(rec.to_dict()))




class BufferTest(unittest.TestCase):
    def test_host_buffers_expose_numpys_interface_only(self):
        b = ok.Buffer(0x1000, 64, "device", 0, "host")
        face = b.__array_interface__
        self.assertEqual(face["shape"], (64,))
        self.assertEqual(face["data"], (0x1000, False))
        self.assertFalse(hasattr(b, "__cuda_array_interface__"))

    def test_cuda_device_buffers_expose_the_cuda_interface_with_their_stream(self):
        b = ok.Buffer(0x2000, 8, "device", 1, "cuda", ok.Stream(0xabc, 1))
        face = b.__cuda_array_interface__
        self.assertEqual(face["version"], 3)
        self.assertEqual(face["stream"], 0xabc)
        self.assertEqual(ok.Buffer(1, 1, "device", 0, "cuda", ok.Stream(0))
                         .__cuda_array_interface__["stream"], 1)  # the legacy default stream
        self.assertIsNone(ok.Buffer(1, 1, "device", 0, "cuda").__cuda_array_interface__["stream"])
        self.assertFalse(hasattr(b, "__array_interface__"))
        self.assertTrue(hasattr(ok.Buffer(1, 1, "pinned", 0, "cuda"), "__array_interface__"))

    def test_sub_buffers_are_bounds_checked(self):
        b = ok.Buffer(0x1000, 16)
        self.assertEqual(b.at(4, 8).ptr, 0x1004)
        self.assertEqual(b.at(16).nbytes, 0)
        with self.assertRaisesRegex(ok.OutOfRange, r"nbytes = 9 at offset 8"):
            b.at(8, 9)
        with self.assertRaisesRegex(ok.OutOfRange, r"offset = 17"):
            b.at(17)

    @unittest.skipUnless(importlib.util.find_spec("numpy"), "numpy is not installed")
    def test_an_empty_buffer_without_an_address_is_an_empty_array(self):
        import numpy

        self.assertEqual(numpy.asarray(ok.Buffer(0, 0)).size, 0)
        self.assertEqual(ok.Buffer(0, 0).numpy().size, 0)

    def test_streams_are_their_handles(self):
        s = ok.Stream(0x10, device=1)
        self.assertEqual(int(s), 16)
        self.assertEqual(s.device, 1)

    def test_dtype_names(self):
        self.assertEqual(ok.dtype_name("float32"), "f32")
        self.assertEqual(ok.dtype_name("torch.bfloat16"), "bf16")
        with self.assertRaisesRegex(ok.OutOfRange, "complex64"):
            ok.dtype_name("complex64")


class ErrorTest(unittest.TestCase):
    def test_codes_follow_the_types(self):
        self.assertEqual(_bridge.error_code(ok.OutOfRange("x")), (_bridge.OUT_OF_RANGE, 0))
        self.assertEqual(_bridge.error_code(KeyError(3)), (_bridge.OUT_OF_RANGE, 0))
        self.assertEqual(_bridge.error_code(ok.StateError("x")), (_bridge.STATE, 0))
        self.assertEqual(_bridge.error_code(MemoryError()), (_bridge.OUT_OF_MEMORY, 0))
        self.assertEqual(_bridge.error_code(ok.InjectedFault("x")), (_bridge.INJECTED, 0))
        self.assertEqual(_bridge.error_code(ok.CudaError("x", 2)), (_bridge.CUDA, 2))
        self.assertEqual(_bridge.error_code(ValueError()), (_bridge.LOGIC, 0))
        self.assertEqual(_bridge.error_code(NotImplementedError()), (_bridge.UNSUPPORTED, 0))
        self.assertEqual(_bridge.error_code(ZeroDivisionError()), (_bridge.RUNTIME, 0))

    def test_with_context_keeps_the_type(self):
        e = ok.with_context(ok.OutOfMemory("no memory"), "offload: tensor 3")
        self.assertIsInstance(e, ok.OutOfMemory)
        self.assertEqual(str(e), "offload: tensor 3: no memory")
        c = ok.with_context(ok.CudaError("bad", 700), "reload")
        self.assertEqual(c.code, 700)

    def test_messages_keep_the_innermost_frames_within_the_budget(self):
        # Two functions in turn, so that no frame repeats the one before (which Python folds).
        def even(n):
            if n == 0:
                raise ok.StateError("innermost")
            odd(n - 1)

        def odd(n):
            even(n - 1)

        try:
            even(40)
        except ok.StateError as e:
            error = e
        code, _, text = _bridge.format_error(error, "X.pause")
        self.assertEqual(code, _bridge.STATE)
        self.assertTrue(text.startswith("python X.pause raised StateError: innermost"))
        self.assertIn("Traceback (most recent call last):", text)
        self.assertIn("outer frame(s) left out", text)
        self.assertIn('raise ok.StateError("innermost")', text)
        self.assertLessEqual(len(text), _bridge.MESSAGE_BUDGET)
        # Frame lengths follow the checkout's path: every budget holds, not only the default.
        for budget in range(200, 2 * _bridge.MESSAGE_BUDGET, 7):
            _, _, text = _bridge.format_error(error, "X.pause", budget=budget)
            self.assertLessEqual(len(text), budget, f"budget {budget}")


class DescribeTest(unittest.TestCase):
    def factory(self, **features):
        module = type(sys)("offloadkit_test_factory")
        module.make = lambda: ok.Plugin(name="t", **features)
        sys.modules[module.__name__] = module
        self.addCleanup(sys.modules.pop, module.__name__)
        return f"{module.__name__}:make"

    def test_capabilities_become_a_list_and_the_name_defaults_to_the_class(self):
        class MyArena(ok.Arena):
            capabilities = ok.BOTH_EXECUTORS | {"asynchronous"}

        name, _, features = _bridge.describe(self.factory(arena=MyArena))
        self.assertEqual(name, "t")
        make, caps, implementation, key_limits = features["arena"]
        self.assertIs(make, MyArena)
        self.assertIn("asynchronous", caps)
        self.assertEqual(implementation, "MyArena")
        self.assertEqual(key_limits, (0, 0, 0))

    def test_a_stash_declares_its_key_limits_within_the_codecs(self):
        class Decimal(ok.Stash):
            capabilities = ok.BOTH_EXECUTORS | {"overflow_exception"}
            key_limits = (1000 // 4, 1000, 1000)

        spec = self.factory(stash=Decimal)
        _, _, features = _bridge.describe(spec)
        self.assertEqual(features["stash"][3], (250, 1000, 1000))
        self.assertIn("overflow_exception", features["stash"][1])
        for bad in [(256, 4097, 1), (0, 1, 1), (1, 1), "abc"]:
            Decimal.key_limits = bad
            with self.assertRaisesRegex(ok.OutOfRange, r"key_limits = .*\[1, 256\], \[1, 4096\]"):
                _bridge.describe(spec)

    def test_a_stash_declares_one_choice_of_each_policy(self):
        class OneTier(ok.Stash):
            capabilities = ok.BOTH_EXECUTORS | {"pinned_tier_only", "config_at_first_use"}

        spec = self.factory(stash=OneTier)
        _, _, features = _bridge.describe(spec)
        self.assertIn("pinned_tier_only", features["stash"][1])
        self.assertIn("config_at_first_use", features["stash"][1])
        for two in [{"device_tier_only", "pinned_tier_only"},
                    {"whole_key_per_tier", "device_tier_only"},
                    {"sticky_flag", "overflow_exception"}]:
            OneTier.capabilities = ok.BOTH_EXECUTORS | two
            with self.assertRaisesRegex(ok.OutOfRange, r"choices of one policy"):
                _bridge.describe(spec)

    def test_only_a_stash_has_key_limits(self):
        f = ok.Feature(lambda ex: None, ok.BOTH_EXECUTORS, "f", key_limits=(1, 1, 1))
        with self.assertRaisesRegex(ok.LogicError, "only a stash has a key space"):
            _bridge.describe(self.factory(arena=f))

    def test_unknown_capabilities_are_named_with_the_valid_ones(self):
        class Bad(ok.Stash):
            capabilities = {"host_executor", "asynchronous"}

        with self.assertRaisesRegex(ok.OutOfRange, r"unknown capabilities \['asynchronous'\]; "
                                    r"valid ones are capturable"):
            _bridge.describe(self.factory(stash=Bad))

    def test_a_feature_needs_an_executor(self):
        f = ok.Feature(lambda ex: None, {"executor_allocations"}, "f")
        with self.assertRaisesRegex(ok.LogicError, "neither cuda_executor nor host_executor"):
            _bridge.describe(self.factory(arena=f))

    def test_a_factory_value_without_colon_is_refused(self):
        with self.assertRaisesRegex(ok.LogicError, "is not MODULE:FACTORY"):
            _bridge.load_factory("just_a_module")

    def test_the_package_does_not_import_torch(self):
        self.assertNotIn("torch", sys.modules)


class ReleaseCachedMemoryTest(unittest.TestCase):
    """What --driver-faults asks before it reads the leak ledger: the plugin's own cache, then
    PyTorch's two caching allocators, only where PyTorch has initialized CUDA."""

    def fake_torch(self, initialized):
        calls = []
        torch = type(sys)("torch")
        torch.cuda = type(sys)("torch.cuda")
        torch.cuda.is_initialized = lambda: initialized
        torch.cuda.empty_cache = lambda: calls.append("empty_cache")
        torch._C = type(sys)("torch._C")
        torch._C._host_emptyCache = lambda: calls.append("host_emptyCache")
        sys.modules["torch"] = torch
        self.addCleanup(sys.modules.pop, "torch")
        return calls

    def describe_plugin(self, **fields):
        module = type(sys)("offloadkit_test_cache_factory")
        module.make = lambda: ok.Plugin(name="t", arena=ok.Feature(
            lambda ex: None, {"host_executor"}, "a"), **fields)
        sys.modules[module.__name__] = module
        self.addCleanup(sys.modules.pop, module.__name__)
        _bridge.describe(f"{module.__name__}:make")
        self.addCleanup(setattr, _bridge, "_PLUGIN", None)

    def test_pytorch_caches_are_emptied_where_cuda_is_initialized(self):
        own = []
        self.describe_plugin(release_cached_memory=lambda: own.append("own"))
        calls = self.fake_torch(initialized=True)
        asked = _bridge.release_cached_memory()
        self.assertEqual(own, ["own"])
        self.assertEqual(calls, ["empty_cache", "host_emptyCache"])
        self.assertEqual(asked, ["plugin.release_cached_memory", "torch.cuda.empty_cache",
                                 "torch._C._host_emptyCache"])

    def test_nothing_is_asked_of_pytorch_before_it_initializes_cuda(self):
        self.describe_plugin()
        calls = self.fake_torch(initialized=False)
        self.assertEqual(_bridge.release_cached_memory(), [])
        self.assertEqual(calls, [])

    def test_without_pytorch_only_the_plugin_is_asked(self):
        self.assertNotIn("torch", sys.modules)
        own = []
        self.describe_plugin(release_cached_memory=lambda: own.append("own"))
        self.assertEqual(_bridge.release_cached_memory(), ["plugin.release_cached_memory"])
        self.assertEqual(own, ["own"])


if __name__ == "__main__":
    unittest.main()
