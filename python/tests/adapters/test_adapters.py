"""The adapters of ``offloadkit.adapters`` against the library stand-ins of ``standins/``: each
protocol call reaches the right library call with the right arguments, the declared profile
matches the library's documented behaviour, and library errors leave as offloadkit's typed errors
with the library's message. Runs without a GPU, PyTorch or offloadkit's extension module: the
stand-ins' device memory is ``RecordingExecutor`` below.

    PYTHONPATH=python python3 -m unittest discover -s python/tests/adapters -p "test_*.py"
"""

import gc
import os
import sys
import types
import unittest
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import standin_factories  # noqa: E402,F401 (puts the stand-ins first on sys.path)

import torch  # noqa: E402 (the stand-in)
import torch_memory_saver as tms_library  # noqa: E402 (the stand-in)
from megatron.core.pipeline_parallel import \
    fine_grained_activation_offload as megatron_library  # noqa: E402 (the stand-in)
from vllm.device_allocator import cumem  # noqa: E402 (the stand-in)

import offloadkit as ok  # noqa: E402
from offloadkit import adapters  # noqa: E402
from offloadkit.adapters import megatron as megatron_adapter  # noqa: E402
from offloadkit.adapters import torch_memory_saver as tms_adapter  # noqa: E402
from offloadkit.adapters import torch_save_on_cpu as save_on_cpu_adapter  # noqa: E402
from offloadkit.adapters import torchtune as torchtune_adapter  # noqa: E402
from offloadkit.adapters import trl as trl_adapter  # noqa: E402
from offloadkit.adapters import vllm as vllm_adapter  # noqa: E402

GRANULARITY = 4096


class RecordingExecutor:
    """Just enough of an executor for the stand-ins: memory is a dict of bytearrays, every call is
    appended to ``log`` (shared with the library recorders), streams are ints."""

    backend = "host"
    device_count = 2

    def __init__(self, log):
        self.log = log
        self.next_address = 1 << 20
        self.mapped = {}  # address -> bytearray of the mapping
        self.host = {}  # address -> bytearray
        self.streams = 0

    def _new_address(self, nbytes):
        address = self.next_address
        self.next_address += nbytes + GRANULARITY
        return address

    def granularity(self, device=0):
        return GRANULARITY

    def reserve(self, nbytes, device=0):
        self.log.append(("reserve", nbytes))
        return self._new_address(nbytes)

    def unreserve(self, address, nbytes):
        self.log.append(("unreserve", address))

    def create_physical(self, nbytes, device=0):
        self.log.append(("create_physical", nbytes))
        return ok.Physical(len(self.log), device, nbytes)

    def release_physical(self, physical):
        self.log.append(("release_physical", physical.value))

    def map(self, address, nbytes, physical):
        self.log.append(("map", address))
        self.mapped[address] = bytearray(nbytes)

    def unmap(self, address, nbytes):
        self.log.append(("unmap", address))
        del self.mapped[address]

    def set_access(self, address, nbytes, device=0):
        pass

    def allocate(self, nbytes, kind="device", device=0):
        self.log.append(("allocate", kind, nbytes))
        address = self._new_address(nbytes)
        self.host[address] = bytearray(nbytes)
        return ok.Buffer(address, nbytes, kind, device, "host")

    def deallocate(self, buffer):
        self.log.append(("deallocate", int(buffer)))
        del self.host[int(buffer)]

    def _memory(self, address):
        address = int(address)
        return self.mapped[address] if address in self.mapped else self.host[address]

    def copy(self, dst, src, nbytes, stream):
        self.log.append(("copy", int(dst), int(src), nbytes))
        self._memory(dst)[:nbytes] = self._memory(src)[:nbytes]

    def create_stream(self, device=0):
        self.streams += 1
        return ok.Stream(1000 + self.streams, device)

    def destroy_stream(self, stream):
        pass

    def synchronize(self, stream):
        self.log.append(("synchronize", int(stream)))


class Recorder:
    """Wraps a library object's methods so that each call is appended to ``log`` with its
    arguments, then runs the real (stand-in) method."""

    def __init__(self, target, names, log):
        self.patches = [mock.patch.object(target, name, side_effect=self._record(
            getattr(target, name), name, log)) for name in names]

    @staticmethod
    def _record(method, name, log):
        def call(*args, **kwargs):
            log.append((name, args, kwargs))
            return method(*args, **kwargs)
        return call

    def __enter__(self):
        for p in self.patches:
            p.start()
        return self

    def __exit__(self, *exc):
        for p in self.patches:
            p.stop()


def config(nbytes=10000, device=0, fixed_mode=None):
    return ok.RegionConfig(bytes=nbytes, device=device, fixed_mode=fixed_mode)


def library_calls(log, names):
    return [entry for entry in log if entry[0] in names]


class TranslateTest(unittest.TestCase):
    def test_each_library_exception_has_its_typed_error_and_keeps_the_message(self):
        oom = type("OutOfMemoryError", (RuntimeError,), {})
        table = [
            (MemoryError("no host memory"), ok.OutOfMemory),
            (oom("CUDA out of memory. Tried to allocate 2 MiB"), ok.OutOfMemory),
            (RuntimeError("CUDA Error: out of memory at cumem_allocator.cpp:90"), ok.OutOfMemory),
            (NotImplementedError("no disk backup on XPU"), adapters.Unsupported),
            (KeyError(7), ok.OutOfRange),
            (IndexError("index 9"), ok.OutOfRange),
            (AssertionError("backward pass should have cleared tracker"), ok.StateError),
            (ValueError("cpu_backup_backend requires enable_cpu_backup=True"), ok.LogicError),
            (TypeError("Expected a tuple of size 4"), ok.LogicError),
            (RuntimeError("CUDA Error: invalid argument at cumem_allocator.cpp:120"),
             ok.CudaError),
            (OSError("disk full"), ok.PlatformError),
        ]
        for error, expected in table:
            with self.subTest(error=repr(error)):
                got = adapters.translate(error, "lib.call(x=1)")
                self.assertIs(type(got), expected)
                self.assertIn("lib.call(x=1)", str(got))
                self.assertIn(type(error).__name__, str(got))
                self.assertIn(str(error), str(got))

    def test_offloadkit_errors_pass_unchanged(self):
        error = ok.OutOfRange("bytes = 0")
        self.assertIs(adapters.translate(error, "call"), error)

    def test_library_call_chains_the_original(self):
        with self.assertRaises(ok.StateError) as caught:
            with adapters.library_call("tms.pause('t')"):
                raise AssertionError("not active")
        self.assertIsInstance(caught.exception.__cause__, AssertionError)

    def test_unsupported_is_read_as_not_implemented(self):
        self.assertTrue(issubclass(adapters.Unsupported, NotImplementedError))
        self.assertTrue(issubclass(adapters.Unsupported, ok.Error))

    def test_a_missing_library_is_named(self):
        with self.assertRaises(adapters.LibraryMissing) as caught:
            adapters.import_library("offloadkit_no_such_library", "offloadkit.adapters.x")
        self.assertIn("offloadkit_no_such_library", str(caught.exception))
        self.assertIn("offloadkit.adapters.x", str(caught.exception))


class TorchMemorySaverTest(unittest.TestCase):
    def setUp(self):
        self.log = []
        self.executor = RecordingExecutor(self.log)
        torch._standin_bind(self.executor)
        saver = tms_library.torch_memory_saver
        self.recorder = Recorder(saver, ["region", "pause", "resume"], self.log)
        self.recorder.__enter__()
        self.addCleanup(self.recorder.__exit__)

    def make(self, **kwargs):
        region = tms_adapter.TorchMemorySaverRegion(self.executor, config(**kwargs))
        self.addCleanup(region.close)
        return region

    def test_profile(self):
        self.assertEqual(tms_adapter.TorchMemorySaverRegion.capabilities, {
            "cuda_executor", "address_stable", "releases_memory", "multi_device",
            "fixed_pause_mode", "synchronous", "no_graphs"})
        plugin = tms_adapter.make()
        self.assertEqual(plugin.name, "torch_memory_saver")
        self.assertEqual(plugin.version, tms_library.__version__)
        self.assertIs(plugin.region, tms_adapter.TorchMemorySaverRegion)

    def test_creation_allocates_in_a_region_of_its_own_tag(self):
        preserve = self.make(fixed_mode="preserve")
        discard = self.make(fixed_mode="discard")
        default = self.make()
        regions = library_calls(self.log, ["region"])
        self.assertEqual([c[2] for c in regions], [
            {"tag": preserve.tag, "enable_cpu_backup": True},
            {"tag": discard.tag, "enable_cpu_backup": False},
            {"tag": default.tag, "enable_cpu_backup": True}])
        self.assertEqual(len({preserve.tag, discard.tag, default.tag}), 3)
        # torch.empty ran inside the library's region: the saver knows the address.
        self.assertIn(preserve.info().data, tms_library.torch_memory_saver._allocations)
        self.assertEqual(preserve.info().footprint, 12288)

    def test_pause_waits_for_the_stream_then_pauses_the_tag(self):
        region = self.make(fixed_mode="preserve")
        stream = ok.Stream(77)
        address = region.info().data
        del self.log[:]
        region.pause("preserve", stream)
        self.assertEqual(self.log[0], ("synchronize", 77))
        self.assertEqual(self.log[1], ("pause", (region.tag,), {}))
        self.assertEqual(region.info().state, "paused")
        self.assertNotIn(address, self.executor.mapped)
        region.resume(ok.Stream(78))
        self.assertIn(("resume", (region.tag,), {}), self.log)
        self.assertEqual(region.info().data, address)
        self.assertEqual(region.info().state, "active")

    def test_preserve_keeps_and_discard_drops_the_contents(self):
        for mode, expected in (("preserve", b"\x5a" * 10000), ("discard", bytes(10000))):
            with self.subTest(mode=mode):
                region = self.make(fixed_mode=mode)
                self.executor.mapped[region.info().data][:10000] = b"\x5a" * 10000
                region.pause(mode, ok.Stream(1))
                region.resume(ok.Stream(1))
                self.assertEqual(bytes(self.executor.mapped[region.info().data][:10000]),
                                 expected)

    def test_the_other_mode_is_unsupported_and_changes_nothing(self):
        region = self.make(fixed_mode="discard")
        del self.log[:]
        with self.assertRaises(adapters.Unsupported) as caught:
            region.pause("preserve", ok.Stream(1))
        self.assertIn("'preserve'", str(caught.exception))
        self.assertIn("enable_cpu_backup=False", str(caught.exception))
        self.assertEqual(self.log, [])
        self.assertEqual(region.info().state, "active")

    def test_close_pauses_an_active_region(self):
        region = self.make(fixed_mode="discard")
        del self.log[:]
        region.close()
        self.assertEqual(library_calls(self.log, ["pause"]), [("pause", (region.tag,), {})])
        region.close()  # once only
        self.assertEqual(len(library_calls(self.log, ["pause"])), 1)

    def test_bad_configuration_is_out_of_range(self):
        for kwargs, text in (({"nbytes": 0}, "bytes = 0"), ({"device": 2}, "device = 2"),
                             ({"fixed_mode": "keep"}, "fixed_mode = 'keep'")):
            with self.subTest(kwargs=kwargs):
                with self.assertRaises(ok.OutOfRange) as caught:
                    tms_adapter.TorchMemorySaverRegion(self.executor, config(**kwargs))
                self.assertIn(text, str(caught.exception))

    def test_out_of_memory_of_the_allocation_is_translated(self):
        with mock.patch.object(self.executor, "create_physical",
                               side_effect=MemoryError("host executor: 0 bytes free")):
            with self.assertRaises(ok.OutOfMemory) as caught:
                tms_adapter.TorchMemorySaverRegion(self.executor, config())
        text = str(caught.exception)
        self.assertIn("torch_memory_saver.region(tag=", text)
        self.assertIn("OutOfMemoryError: CUDA out of memory", text)
        self.assertIn("0 bytes free", text)

    def test_a_library_value_error_is_a_logic_error(self):
        with mock.patch.object(tms_library.torch_memory_saver, "region",
                               side_effect=ValueError("cpu_backup_backend requires "
                                                      "enable_cpu_backup=True")):
            with self.assertRaises(ok.LogicError) as caught:
                tms_adapter.TorchMemorySaverRegion(self.executor, config())
        self.assertIn("cpu_backup_backend requires enable_cpu_backup=True",
                      str(caught.exception))

    def test_make_chooses_the_hook_mode_from_ld_preload(self):
        saver = tms_library.torch_memory_saver
        self.assertEqual(tms_adapter.hook_mode_for({}), "torch")
        self.assertEqual(tms_adapter.hook_mode_for(
            {"LD_PRELOAD": "/x/torch_memory_saver_hook_mode_preload.abi3.so:/y/lib.so"}),
            "preload")
        tms_adapter.make()
        self.assertEqual(saver._hook_mode, tms_adapter.hook_mode_for())
        tms_adapter.make(hook_mode="preload")
        self.assertEqual(saver._hook_mode, "preload")
        with self.assertRaises(ok.OutOfRange) as caught:
            tms_adapter.make(hook_mode="ld")
        self.assertIn("hook_mode = 'ld'", str(caught.exception))

    def test_a_hook_mode_after_initialization_is_a_state_error(self):
        with mock.patch.object(type(tms_library.torch_memory_saver), "hook_mode",
                               property(None, mock.Mock(side_effect=AssertionError(
                                   "Cannot configure after initialization")))):
            with self.assertRaises(ok.StateError) as caught:
                tms_adapter.make(hook_mode="torch")
        self.assertIn("Cannot configure after initialization", str(caught.exception))

    def test_retain_factory_switches_the_library_setting(self):
        saver = tms_library.torch_memory_saver
        self.addCleanup(setattr, saver, "retain_cpu_backup", saver.retain_cpu_backup)
        saver.retain_cpu_backup = False
        plugin = tms_adapter.make_retain_cpu_backup()
        self.assertTrue(saver.retain_cpu_backup)
        self.assertIs(plugin.region, tms_adapter.TorchMemorySaverRegion)


class VllmTest(unittest.TestCase):
    def setUp(self):
        self.log = []
        self.executor = RecordingExecutor(self.log)
        torch._standin_bind(self.executor)
        self.allocator = cumem.CuMemAllocator.get_instance()
        self.recorder = Recorder(self.allocator, ["use_memory_pool", "sleep", "wake_up"],
                                 self.log)
        self.recorder.__enter__()
        self.addCleanup(self.recorder.__exit__)

    def make(self, **kwargs):
        region = vllm_adapter.CuMemAllocatorRegion(self.executor, config(**kwargs))
        self.addCleanup(region.close)
        return region

    def test_profile(self):
        self.assertEqual(vllm_adapter.CuMemAllocatorRegion.capabilities, {
            "cuda_executor", "address_stable", "releases_memory", "multi_device",
            "synchronous", "no_graphs"})
        self.assertNotIn("fixed_pause_mode", vllm_adapter.CuMemAllocatorRegion.capabilities)
        plugin = vllm_adapter.make()
        self.assertEqual((plugin.name, plugin.version), ("vllm-cumem", "0+offloadkit.standin"))

    def test_creation_allocates_in_the_pool_of_its_own_tag(self):
        region = self.make()
        self.assertEqual(library_calls(self.log, ["use_memory_pool"]),
                         [("use_memory_pool", (), {"tag": region.tag})])
        self.assertEqual(self.allocator.pointer_to_data[region.info().data].tag, region.tag)

    def test_pause_modes_choose_the_offload_tags(self):
        region = self.make()
        for mode, tags in (("preserve", (region.tag,)), ("discard", ())):
            with self.subTest(mode=mode):
                del self.log[:]
                region.pause(mode, ok.Stream(5))
                self.assertEqual(self.log[0], ("synchronize", 5))
                self.assertEqual(self.log[1], ("sleep", (), {"offload_tags": tags}))
                region.resume(ok.Stream(5))
                self.assertEqual(library_calls(self.log, ["wake_up"]),
                                 [("wake_up", (), {"tags": [region.tag]})])

    def test_contents_and_address_across_sleep(self):
        region = self.make()
        address = region.info().data
        self.executor.mapped[address][:10000] = b"\x33" * 10000
        region.pause("preserve", ok.Stream(1))
        self.assertNotIn(address, self.executor.mapped)
        region.resume(ok.Stream(1))
        self.assertEqual(region.info().data, address)
        self.assertEqual(bytes(self.executor.mapped[address][:10000]), b"\x33" * 10000)

    def test_one_live_region(self):
        first = self.make()
        with self.assertRaises(adapters.Unsupported) as caught:
            vllm_adapter.CuMemAllocatorRegion(self.executor, config())
        self.assertIn(repr(first.tag), str(caught.exception))
        self.assertIn("sleep() releases every allocation", str(caught.exception))
        first.close()
        second = self.make()  # the allocator is free again
        self.assertEqual(second.info().state, "active")

    def test_close_of_a_paused_region_wakes_it_and_gives_the_pool_back(self):
        region = self.make()
        region.pause("discard", ok.Stream(1))
        del self.log[:]
        region.close()
        self.assertEqual(library_calls(self.log, ["wake_up"]),
                         [("wake_up", (), {"tags": [region.tag]})])
        gc.collect()
        self.assertNotIn(region.tag, self.allocator.allocator_and_pools)
        self.assertEqual(self.allocator.pointer_to_data, {})
        self.assertIn(("unreserve", region.info().data), self.log)

    def test_a_driver_error_keeps_the_extension_message(self):
        region = self.make()
        with self.assertRaises(ok.CudaError) as caught:
            region.resume(ok.Stream(1))  # mapped already: the bridge never sends this
        text = str(caught.exception)
        self.assertIn(f"CuMemAllocator.wake_up(tags=['{region.tag}'])", text)
        self.assertIn("CUDA Error: invalid argument", text)

    def test_an_allocator_without_extension_is_unsupported(self):
        with mock.patch.object(cumem, "cumem_available", False):
            with self.assertRaises(adapters.Unsupported) as caught:
                vllm_adapter.CuMemAllocatorRegion(self.executor, config())
        self.assertIn("cumem_available is False", str(caught.exception))


class OffloadActivationsTest(unittest.TestCase):
    """torchtune's and TRL's adapters share their shape; each runs every test."""

    cases = (
        ("torchtune", torchtune_adapter, "torchtune.training", ok.StateError,
         frozenset({"cuda_executor"})),
        ("trl", trl_adapter, "trl.models.activation_offloading", ok.LogicError,
         frozenset({"cuda_executor", "opaque_predicate"})),
    )

    @staticmethod
    def library_class(module):
        return sys.modules[module].OffloadActivations if module in sys.modules else \
            __import__(module, fromlist=["OffloadActivations"]).OffloadActivations

    def build(self, adapter, **kwargs):
        cls = adapter.activation(**kwargs)
        options = types.SimpleNamespace(max_pending_bytes=0, keep_threshold=0)
        return cls, cls(RecordingExecutor([]), options)

    def test_library_defaults_are_unsupported_with_the_reason(self):
        for name, adapter, *_ in self.cases:
            with self.subTest(library=name):
                with self.assertRaises(adapters.Unsupported) as caught:
                    adapter.make()
                text = str(caught.exception)
                for needed in ("use_streams=True", "_current_graph_task_id",
                               "_current_autograd_node", "queue_callback",
                               "no forward/backward phase", "issue 31"):
                    self.assertIn(needed, text)
                with self.assertRaises(adapters.Unsupported):
                    adapter.activation(use_streams=True)

    def test_profile_and_library_arguments(self):
        for name, adapter, module, _, capabilities in self.cases:
            with self.subTest(library=name):
                library = self.library_class(module)
                del library.instances[:]
                cls, activation = self.build(adapter, min_offload_size=4096,
                                             use_pin_memory=False)
                self.assertEqual(cls.capabilities, capabilities)
                self.assertNotIn("origin_device", cls.capabilities)
                self.assertEqual(activation.keep_threshold, 4096)
                self.assertEqual(len(library.instances), 1)
                self.assertEqual(library.instances[0].kwargs["use_streams"], False)
                self.assertEqual(library.instances[0].kwargs["min_offload_size"], 4096)
                self.assertEqual(library.instances[0].kwargs["use_pin_memory"], False)
                plugin = adapter.make_single_stream()
                self.assertEqual(plugin.version, "0+offloadkit.standin")
                self.assertEqual(plugin.activation.capabilities, capabilities)

    def test_each_case_gets_its_own_library_object_and_its_hooks(self):
        for name, adapter, module, *_ in self.cases:
            with self.subTest(library=name):
                library = self.library_class(module)
                del library.instances[:]
                _, first = self.build(adapter)
                _, second = self.build(adapter)
                self.assertEqual(len(library.instances), 2)
                tensor = types.SimpleNamespace(nbytes=2048)
                handle = second.pack_hook(tensor)
                self.assertEqual(library.instances[1].calls, [("pack", id(tensor))])
                self.assertEqual(library.instances[0].calls, [])
                self.assertEqual(second.unpack_hook(handle), ("host copy", 2048))

    def test_the_phase_error_is_translated_with_its_message(self):
        for name, adapter, _, expected, _ in self.cases:
            with self.subTest(library=name):
                _, activation = self.build(adapter)
                a = activation.pack_hook(types.SimpleNamespace(nbytes=4096))
                activation.pack_hook(types.SimpleNamespace(nbytes=4096))
                activation.unpack_hook(a)
                with self.assertRaises(expected) as caught:
                    activation.pack_hook(types.SimpleNamespace(nbytes=4096))
                self.assertIn("cleared tracker of all tensors", str(caught.exception))
                self.assertIn(".pack_hook", str(caught.exception))

    def test_each_pack_reports_the_library_decision(self):
        # PyTorch's part of the saved-tensor adapter (the zero-copy tensor over the source) is
        # replaced by an object that keeps the source's view alive as long as the library
        # references it, as a torch tensor over it does.
        # A zero-element tensor has no memory to view: PyTorch's tensor for it holds nothing of
        # the source (as ``as_torch`` makes it), so only the library's own record can say that it
        # was kept.
        def as_torch(tensor):
            return types.SimpleNamespace(nbytes=tensor.nbytes,
                                         view=tensor.data if tensor.nbytes else None)

        for name, adapter, *_ in self.cases:
            with self.subTest(library=name), mock.patch("offloadkit.hooks.as_torch", as_torch):
                _, activation = self.build(adapter, min_offload_size=1024)
                released = []

                def tensor(nbytes, tag):
                    data = ok.Buffer(0x10000 * (len(released) + 1), nbytes, "device", 0, "host")
                    return ok.Tensor(data, nbytes, 0, "u8", (nbytes,),
                                     release=lambda: released.append(tag))

                activation.pack(tensor(2048, "large"), ok.Stream(1))
                activation.pack(tensor(512, "small"), ok.Stream(1))
                activation.pack(tensor(0, "empty"), ok.Stream(1))
                stats = activation.stats()
                self.assertEqual((stats.packed, stats.kept, stats.offloaded_bytes), (3, 2, 2048))
                # The offloaded source went back at once, and the empty one (nothing of it is
                # held); the kept one stays with the library.
                self.assertEqual(released, ["large", "empty"])

    def test_an_unknown_id_is_a_state_error(self):
        for name, adapter, *_ in self.cases:
            with self.subTest(library=name):
                _, activation = self.build(adapter)
                with self.assertRaises(ok.StateError) as caught:
                    activation.unpack_hook(99)
                self.assertIn("untracked tensor with id 99", str(caught.exception))


class SaveOnCpuTest(unittest.TestCase):
    """PyTorch's save_on_cpu through its adapter: its hooks, one object per case, every pack
    offloaded, PyTorch's errors translated."""

    class Hooks:
        """save_on_cpu's shape (``pack_hook``, ``unpack_hook``), recording its arguments."""

        instances = []

        def __init__(self, pin_memory=False, device_type="cuda", fail=None):
            self.kwargs = {"pin_memory": pin_memory, "device_type": device_type}
            self.fail = fail
            type(self).instances.append(self)

        def pack_hook(self, tensor):
            if self.fail:
                raise self.fail
            return ("cuda:0", tensor.nbytes)

        def unpack_hook(self, packed):
            return packed

    def build(self, hooks=Hooks):
        graph = sys.modules["torch.autograd.graph"]
        with mock.patch.object(graph, "save_on_cpu", hooks):
            cls = save_on_cpu_adapter.activation()
        options = types.SimpleNamespace(max_pending_bytes=0, keep_threshold=0)
        return cls, cls(RecordingExecutor([]), options)

    def test_profile_and_library_arguments(self):
        del self.Hooks.instances[:]
        cls, activation = self.build()
        self.assertEqual(cls.capabilities, frozenset({"cuda_executor", "origin_device",
                                                      "prefetch_bound", "pending_bound"}))
        self.assertEqual(cls.implementation, "torch-save-on-cpu")
        self.assertEqual(activation.keep_threshold, 0)
        self.assertEqual([h.kwargs for h in self.Hooks.instances],
                         [{"pin_memory": True, "device_type": "cuda"}])
        plugin = save_on_cpu_adapter.make()
        self.assertEqual((plugin.name, plugin.version), ("torch-save-on-cpu",
                                                         "0+offloadkit.standin"))
        self.assertEqual(plugin.activation.capabilities, cls.capabilities)

    def test_each_case_gets_its_own_hooks(self):
        del self.Hooks.instances[:]
        _, first = self.build()
        _, second = self.build()
        self.assertEqual(len(self.Hooks.instances), 2)
        self.assertIs(second.library, self.Hooks.instances[1])
        self.assertEqual(second.unpack_hook(second.pack_hook(types.SimpleNamespace(nbytes=64))),
                         ("cuda:0", 64))

    def test_every_pack_is_offloaded(self):
        # As OffloadActivationsTest.test_each_pack_reports_the_library_decision, without a
        # tracker: a zero-element and a 1-byte tensor are offloaded like any other.
        def as_torch(tensor):
            return types.SimpleNamespace(nbytes=tensor.nbytes)

        with mock.patch("offloadkit.hooks.as_torch", as_torch):
            _, activation = self.build()
            released = []
            for nbytes in (2048, 1, 0):
                data = ok.Buffer(0x10000 * (len(released) + 1), nbytes, "device", 0, "host")
                activation.pack(ok.Tensor(data, nbytes, 0, "u8", (nbytes,),
                                          release=lambda n=nbytes: released.append(n)),
                                ok.Stream(1))
            stats = activation.stats()
            self.assertEqual((stats.packed, stats.kept, stats.offloaded_bytes), (3, 0, 2049))
            self.assertEqual(released, [2048, 1, 0])

    def test_pytorch_errors_are_translated_with_their_message(self):
        for error, expected in ((RuntimeError("CUDA error: out of memory"), ok.OutOfMemory),
                                (RuntimeError("CUDA error: an illegal memory access"),
                                 ok.CudaError),
                                (TypeError("bad dtype"), ok.LogicError)):
            with self.subTest(error=str(error)):
                def hooks(pin_memory=False, device_type="cuda", error=error):
                    return self.Hooks(pin_memory, device_type, fail=error)

                _, activation = self.build(hooks)
                with self.assertRaises(expected) as caught:
                    activation.pack_hook(types.SimpleNamespace(nbytes=8))
                self.assertIn("torch.autograd.graph.save_on_cpu.pack_hook", str(caught.exception))
                self.assertIn(str(error), str(caught.exception))


class FakeTensor:
    """Just enough of a torch tensor for Megatron's stand-in: bytes, elements and a device."""

    def __init__(self, payload, device="cuda"):
        self.payload = bytes(payload)
        self.nbytes = len(self.payload)
        self.device = types.SimpleNamespace(type=device)

    def numel(self):
        return self.nbytes


class MegatronTest(unittest.TestCase):
    def build(self, min_offloaded_tensor_size=1024):
        cls = megatron_adapter.activation(min_offloaded_tensor_size=min_offloaded_tensor_size)
        options = types.SimpleNamespace(max_pending_bytes=0, keep_threshold=0)
        activation = cls(RecordingExecutor([]), options)
        self.addCleanup(activation.close)
        return activation

    def test_profile(self):
        activation = self.build()
        self.assertEqual(type(activation).capabilities,
                         {"cuda_executor", "opaque_predicate", "origin_device"})
        self.assertNotIn("dedup_by_storage", type(activation).capabilities)
        activation.close()
        plugin = megatron_adapter.make()
        self.assertEqual((plugin.name, plugin.version),
                         ("megatron-fine-grained-offload", "0+offloadkit.standin"))
        self.assertEqual(plugin.activation.capabilities, megatron_adapter.CAPABILITIES)

    def test_each_object_gets_a_fresh_manager_and_one_chunk(self):
        interface = megatron_library.FineGrainedActivationOffloadingInterface
        log = []
        with Recorder(interface, ["reset_instance", "init_chunk_handler"], log):
            activation = self.build(min_offloaded_tensor_size=4096)
        self.assertEqual(log, [
            ("reset_instance", (), {}),
            ("init_chunk_handler", (), {
                "pp_rank": 0, "vp_size": 1, "vp_stage": None, "min_offloaded_tensor_size": 4096,
                "delta_offload_bytes_across_pp_ranks": 0, "activation_offload_fraction": 1.0})])
        manager = megatron_library.PipelineOffloadManager.get_instance()
        self.assertIs(activation.manager, manager)
        self.assertIs(activation.chunk, manager.cur_forward_chunk())
        self.assertEqual(activation.chunk.min_offloaded_tensor_size, 4096)

    def test_layers_are_groups_and_hints_drive_commit_and_reload(self):
        activation = self.build()
        chunk = activation.chunk
        a, b, c = FakeTensor(b"a" * 2048), FakeTensor(b"b" * 2048), FakeTensor(b"c" * 2048)
        ta, tb = activation.pack_hook(a), activation.pack_hook(b)
        activation.forward_layer_end(0, ok.Stream(1))
        tc = activation.pack_hook(c)
        activation.forward_layer_end(1, ok.Stream(1))
        activation.forward_layer_end(2, ok.Stream(1))  # no group open: nothing to commit
        self.assertEqual((ta, tb, tc), ((1, 0), (1, 1), (2, 0)))
        activation.backward_layer_begin(1, ok.Stream(2))
        activation.backward_layer_begin(0, ok.Stream(2))
        self.assertEqual([call[:2] for call in chunk.calls if call[0] != "tensor_push"], [
            ("on_group_start_forward", "core_attn"), ("on_group_commit_forward", "core_attn"),
            ("on_group_start_forward", "core_attn"), ("on_group_commit_forward", "core_attn"),
            ("on_group_commit_backward", "core_attn"), ("on_group_start_backward",),
            ("on_group_commit_backward", "core_attn")])
        self.assertEqual([call[2] for call in chunk.calls
                          if call[0] == "on_group_commit_forward"], [[], []])

    def test_round_trip_keeps_the_bytes_and_the_device(self):
        activation = self.build()
        tensors = [FakeTensor(bytes(range(i, i + 200)) * 8) for i in range(3)]
        tags = []
        for layer, tensor in enumerate(tensors):
            tags.append(activation.pack_hook(tensor))
            activation.forward_layer_end(layer, ok.Stream(1))
        for layer in reversed(range(3)):
            activation.backward_layer_begin(layer, ok.Stream(1))
            out = activation.unpack_hook(tags[layer])
            self.assertIsNot(out, tensors[layer])  # offloaded and reloaded
            self.assertEqual(out.payload, tensors[layer].payload)
            self.assertIs(out.device, tensors[layer].device)

    def test_each_pack_reports_the_checker_decision(self):
        def as_torch(tensor):
            return FakeTensor(bytes(tensor.nbytes))

        with mock.patch("offloadkit.hooks.as_torch", as_torch):
            activation = self.build(min_offloaded_tensor_size=1024)
            for nbytes in (2048, 512):
                data = ok.Buffer(0x10000 * nbytes, nbytes, "device", 0, "host")
                activation.pack(ok.Tensor(data, nbytes, 0, "u8", (nbytes,)), ok.Stream(1))
        stats = activation.stats()
        self.assertEqual((stats.packed, stats.kept, stats.offloaded_bytes), (2, 1, 2048))

    def test_one_live_object_per_process(self):
        first = self.build()
        with self.assertRaises(adapters.Unsupported) as caught:
            self.build()
        self.assertIn("PipelineOffloadManager is a process-wide singleton", str(caught.exception))
        first.close()
        second = self.build()
        self.assertIsNot(second.manager, None)

    def test_close_replaces_the_manager(self):
        activation = self.build()
        manager = activation.manager
        activation.pack_hook(FakeTensor(bytes(4096)))
        activation.close()
        self.assertIsNot(megatron_library.PipelineOffloadManager.get_instance(), manager)
        self.assertIsNone(activation.chunk)
        activation.close()  # once only

    def test_library_errors_are_translated_with_their_message(self):
        activation = self.build()
        with self.assertRaises(ok.OutOfRange) as caught:
            activation.unpack_hook((1, 0))  # no group 1 holds this tag
        self.assertIn("ChunkOffloadHandler.tensor_pop", str(caught.exception))
        activation.pack_hook(FakeTensor(bytes(4096)))
        with mock.patch.object(activation.chunk, "on_group_commit_forward",
                               side_effect=AssertionError("Group core_attn not found in []")):
            with self.assertRaises(ok.StateError) as caught:
                activation.forward_layer_end(0, ok.Stream(1))
        self.assertIn("on_group_commit_forward('core_attn', [])", str(caught.exception))
        self.assertIn("Group core_attn not found", str(caught.exception))
        self.assertFalse(activation._committing)


if __name__ == "__main__":
    unittest.main()
