"""``offloadkit.adapters.megatron_paged_stash`` against the stand-in of Megatron-LM's
``megatron.core.transformer.moe.paged_stash`` (``standins/``): the adapter drives Megatron's own
manager, buffer and tensors as Megatron does, its declared profile (one sticky flag, a whole key in
one tier, page ids, decimal keys) is what the library does, and library errors leave as offloadkit's
typed errors. Runs without a GPU, PyTorch or offloadkit's extension module: device memory is host
memory of ``MemoryExecutor`` below, which the stand-in torch computes on with NumPy.

    PYTHONPATH=python python3 -m unittest discover -s python/tests/adapters -p "test_*.py"
"""

import ctypes
import os
import random
import struct
import sys
import unittest
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import standin_factories  # noqa: E402,F401 (puts the stand-ins first on sys.path)

try:
    import numpy as np
except ImportError:  # the stand-in torch computes with NumPy
    np = None
import torch  # noqa: E402 (the stand-in)
from megatron.core.transformer.moe import paged_stash as library  # noqa: E402 (the stand-in)

import offloadkit as ok  # noqa: E402
from offloadkit import adapters  # noqa: E402
from offloadkit.adapters import megatron_paged_stash as adapter  # noqa: E402

STREAM = ok.Stream(7, 0)


class MemoryExecutor:
    """Host memory at real addresses (NumPy arrays) standing for every kind; copies are
    ``memmove``; streams are ints and every call completes at once."""

    backend = "host"
    device_count = 1

    def __init__(self):
        self.arrays = {}
        self.streams = 100

    def allocate(self, nbytes, kind="device", device=0):
        array = np.zeros(max(nbytes, 1), dtype=np.uint8)
        self.arrays[array.ctypes.data] = array
        return ok.Buffer(array.ctypes.data, nbytes, kind, device, "host")

    def deallocate(self, buffer):
        del self.arrays[int(buffer)]

    def copy(self, dst, src, nbytes, stream):
        ctypes.memmove(int(dst), int(src), nbytes)

    def create_stream(self, device=0):
        self.streams += 1
        return ok.Stream(self.streams, device)

    def synchronize(self, stream):
        pass


def config(row_bytes=24, rows_per_page=4, max_rows=10, device_pages=6, pinned_pages=4,
           max_keys=16):
    return ok.StashConfig(row_bytes=row_bytes, rows_per_page=rows_per_page, max_rows=max_rows,
                          device_pages=device_pages, pinned_pages=pinned_pages,
                          max_keys=max_keys)


def conservation(snap, cfg):
    """offloadkit's check_conservation (core/stash/src/stash.cpp), page ids included: "" or the
    first violation."""
    held_dev = sum(e.device_pages for e in snap.entries)
    held_pin = sum(e.pinned_pages for e in snap.entries)
    for e in snap.entries:
        need = -(-e.rows // cfg.rows_per_page)
        if e.device_pages + e.pinned_pages != need:
            return f"key {e.key} holds {e.device_pages} + {e.pinned_pages} pages, not {need}"
    if snap.free_device + held_dev != cfg.device_pages:
        return f"device tier: {snap.free_device} free + {held_dev} held"
    if snap.free_pinned + held_pin != cfg.pinned_pages:
        return f"pinned tier: {snap.free_pinned} free + {held_pin} held"
    ids = list(snap.free_ids) + [i for e in snap.entries for i in e.page_ids]
    if sorted(ids) != list(range(cfg.device_pages + cfg.pinned_pages)):
        return f"page ids {sorted(ids)}: one lost or handed out twice"
    for e in snap.entries:
        if any((i < cfg.device_pages) != (j < e.device_pages) for j, i in enumerate(e.page_ids)):
            return f"key {e.key}: a page in the wrong tier"
    return ""


class Harness:
    """One adapter object over the stand-in, with a source, destination and row buffers."""

    def __init__(self, test, cfg):
        self.cfg = cfg
        self.ex = MemoryExecutor()
        torch._standin_bind(self.ex)
        self.cls = adapter.stash_class()
        self.stash_obj = self.cls(self.ex, cfg, STREAM)
        test.addCleanup(self.stash_obj.close)
        self.nbytes = cfg.max_rows * cfg.row_bytes
        self.src = self.ex.allocate(self.nbytes)
        self.dst = self.ex.allocate(self.nbytes)
        self.rows = self.ex.allocate(8)
        self.rows_out = self.ex.allocate(8)
        self.payloads = {}

    def stash(self, key, rows, seed=None):
        draw = random.Random(seed if seed is not None else str(key))
        payload = bytes(draw.randrange(256) for _ in range(self.nbytes))
        self.src.numpy()[:] = np.frombuffer(payload, dtype=np.uint8)
        self.rows.numpy()[:] = np.frombuffer(struct.pack("<Q", rows), dtype=np.uint8)
        self.stash_obj.stash(ok.StashKey(*key), self.src, self.rows, STREAM)
        self.src.numpy()[:] = 0xEE  # the caller reuses its source
        self.payloads[tuple(key)] = payload
        return payload

    def restore(self, key):
        """(rows written to rows_out, the destination's bytes), the destination cleared to 0xAB
        first."""
        self.dst.numpy()[:] = 0xAB
        self.rows_out.numpy()[:] = 0xCD
        self.stash_obj.restore(ok.StashKey(*key), self.dst, self.rows_out, STREAM)
        rows = struct.unpack("<Q", bytes(self.rows_out.numpy()))[0]
        return rows, bytes(self.dst.numpy())

    def snapshot(self):
        return self.stash_obj.snapshot(STREAM)

    def check_restored(self, test, key, rows):
        got_rows, got = self.restore(key)
        test.assertEqual(got_rows, rows)
        n = rows * self.cfg.row_bytes
        test.assertEqual(got[:n], self.payloads[tuple(key)][:n])
        test.assertEqual(got[n:], b"\xab" * (self.nbytes - n))  # untouched past the rows


def sticky_flag_violation(test):
    """The sticky-flag scenario: a key that fits neither tier raises the flag, after which a stash
    stores nothing and a restore gives back nothing until clear_status. Returns the first way the
    stash breaks it ("" if none)."""
    h = Harness(test, config(rows_per_page=2, max_rows=8, device_pages=3, pinned_pages=2))
    h.stash((0, 1, 1), 6)  # 3 device pages
    h.stash((0, 2, 1), 8)  # 4 pages: neither tier has them -> the flag
    snap = h.snapshot()
    if snap.status.ok:
        return "the overflow did not raise the flag"
    h.stash((0, 3, 1), 2)  # fits the pinned tier, but the flag is up
    snap = h.snapshot()
    if [tuple(e.key) for e in snap.entries] != [(0, 1, 1)] or snap.free_pinned != 2:
        return f"a stash after the flag stored: {snap}"
    if h.restore((0, 1, 1))[0] != 0:
        return "a restore after the flag gave rows back"
    if len(h.snapshot().entries) != 1:
        return "a restore after the flag dropped the key"
    if conservation(h.snapshot(), h.cfg):
        return conservation(h.snapshot(), h.cfg)
    return ""


@unittest.skipIf(np is None, "NumPy is not installed (the stand-in torch computes with it)")
class MegatronPagedStashTest(unittest.TestCase):
    def setUp(self):
        self.assertIsNone(library.PagedStashManager.STASH_MGR)
        self.addCleanup(setattr, library.PagedStashManager, "STASH_MGR", None)

    def test_profile(self):
        cls = adapter.stash_class()
        self.assertEqual(cls.capabilities, {"cuda_executor", "sticky_flag", "whole_key_per_tier",
                                            "page_ids"})
        self.assertEqual(cls.key_limits, (256, 1000, 1000))
        plugin = adapter.make()
        self.assertEqual((plugin.name, plugin.version),
                         ("megatron-paged-stash", "0+offloadkit.standin"))
        self.assertEqual(plugin.stash.capabilities, adapter.CAPABILITIES)
        self.assertIn(adapters.Adapter(
            "megatron-paged-stash", "offloadkit.adapters.megatron_paged_stash:make", "stash",
            "megatron.core", "megatron-core", mock.ANY), adapters.ADAPTERS)

    def test_construction_brings_a_manager_of_its_own_to_captured(self):
        first = Harness(self, config(rows_per_page=4, device_pages=6, pinned_pages=4))
        manager = first.stash_obj.manager
        self.assertIsNone(library.PagedStashManager.STASH_MGR)  # put back after each call
        self.assertEqual((manager.status, manager.enabled, manager.iteration),
                         ("captured", True, 2))
        buffer = manager.stash_buffers[torch.uint8][24]
        self.assertIs(first.stash_obj.buffer, buffer)
        self.assertEqual((buffer.num_cuda_pages, buffer.num_host_pages, buffer.page_size),
                         (6, 4, 4))
        self.assertIs(buffer.overflow, manager.overflow)
        second = Harness(self, config(pinned_pages=0))
        self.assertIsNot(second.stash_obj.manager, manager)
        self.assertIsNone(second.stash_obj.buffer.host_buffer)  # no host tier

    def test_stash_and_restore_go_through_the_manager_as_megatron_drives_it(self):
        h = Harness(self, config())
        manager = h.stash_obj.manager
        calls = []
        for name in ("on_save_for_backward", "stash_paged_tensors", "wait_for_stash_to_complete"):
            method = getattr(manager, name)
            setattr(manager, name, lambda *a, _m=method, _n=name: calls.append(_n) or _m(*a))
        h.stash((1, 2, 3), 5)
        self.assertEqual(calls, ["on_save_for_backward", "stash_paged_tensors",
                                 "wait_for_stash_to_complete"])
        self.assertEqual(manager.max_num_tokens, 10)
        self.assertEqual(manager.paged_tensors_to_reload[2002003], [])  # kept by the adapter
        self.assertEqual(library.paged_stash_copy_kernel.launches[-1][0], (10,))
        h.check_restored(self, (1, 2, 3), 5)
        self.assertEqual(manager._unpack_stream_status, "idle")

    def test_round_trip_of_random_token_counts_keeps_bytes_and_pages(self):
        cfg = config(row_bytes=24, rows_per_page=3, max_rows=10, device_pages=8, pinned_pages=8)
        h = Harness(self, cfg)
        draw = random.Random(5)
        for round_ in range(4):
            keys = [(draw.randrange(3), draw.randrange(999), draw.randrange(999))
                    for _ in range(3)]
            keys = list(dict.fromkeys(keys))
            counts = {k: draw.randrange(0, 11) for k in keys}
            for k in keys:
                h.stash(k, counts[k], seed=round_)
                self.assertEqual(conservation(h.snapshot(), cfg), "")
            snap = h.snapshot()
            self.assertTrue(snap.status.ok, snap)
            self.assertEqual({tuple(e.key): e.rows for e in snap.entries}, counts)
            for k in reversed(keys):
                h.check_restored(self, k, counts[k])
            snap = h.snapshot()
            self.assertEqual((snap.free_device, snap.free_pinned, list(snap.entries)),
                             (8, 8, []))

    def test_a_key_goes_whole_into_the_pinned_tier_when_the_device_tier_lacks_room(self):
        cfg = config(rows_per_page=2, max_rows=8, device_pages=3, pinned_pages=4)
        h = Harness(self, cfg)
        h.stash((0, 0, 0), 4)  # 2 device pages, 1 left
        h.stash((0, 0, 1), 3)  # needs 2: whole into pinned memory, not split
        snap = h.snapshot()
        pages = {tuple(e.key): (e.device_pages, e.pinned_pages) for e in snap.entries}
        self.assertEqual(pages, {(0, 0, 0): (2, 0), (0, 0, 1): (0, 2)})
        self.assertEqual(conservation(snap, cfg), "")
        self.assertEqual(int(h.stash_obj.manager.host_spill.item()), 1)
        h.check_restored(self, (0, 0, 1), 3)  # from the host buffer
        h.check_restored(self, (0, 0, 0), 4)

    def test_the_sticky_flag_stops_stash_and_restore_until_cleared(self):
        self.assertEqual(sticky_flag_violation(self), "")

    def test_clear_status_lets_held_keys_back_and_drops_the_overflowed_one(self):
        cfg = config(rows_per_page=2, max_rows=8, device_pages=3, pinned_pages=2)
        h = Harness(self, cfg)
        h.stash((0, 1, 1), 6)
        h.stash((0, 2, 1), 8)  # overflow
        h.stash_obj.clear_status(STREAM)
        self.assertTrue(h.snapshot().status.ok)
        h.check_restored(self, (0, 1, 1), 6)
        # The dropped key holds nothing: its zeroed page record is not reloaded (page 0 is not
        # handed back a second time), and the restore of an empty key raises the flag.
        self.assertEqual(h.restore((0, 2, 1))[0], 0)
        snap = h.snapshot()
        self.assertFalse(snap.status.ok)
        self.assertEqual(conservation(snap, cfg), "")
        self.assertEqual((snap.free_device, snap.free_pinned), (3, 2))
        h.stash_obj.reset(STREAM)
        self.assertTrue(h.snapshot().status.ok)
        h.stash((0, 2, 1), 4)
        h.check_restored(self, (0, 2, 1), 4)

    def test_too_many_rows_double_stash_and_empty_restore_raise_the_flag_on_the_device(self):
        cfg = config(max_rows=10)
        for action in ("rows", "huge", "double", "empty"):
            with self.subTest(action):
                h = Harness(self, cfg)
                h.stash((0, 0, 0), 3)
                if action == "rows":
                    h.stash((0, 0, 1), 11)
                elif action == "huge":
                    h.stash((0, 0, 1), 1 << 63)
                elif action == "double":
                    first = h.payloads[(0, 0, 0)]
                    h.stash((0, 0, 0), 2, seed=99)
                    h.payloads[(0, 0, 0)] = first
                else:
                    self.assertEqual(h.restore((0, 0, 2))[0], 0)
                snap = h.snapshot()
                self.assertFalse(snap.status.ok)
                self.assertEqual([(tuple(e.key), e.rows) for e in snap.entries], [((0, 0, 0), 3)])
                self.assertEqual(conservation(snap, cfg), "")
                h.stash_obj.clear_status(STREAM)
                h.check_restored(self, (0, 0, 0), 3)  # the first stash, intact

    def test_zero_max_rows_holds_zero_row_keys_without_a_paged_tensor(self):
        h = Harness(self, config(max_rows=0))
        launches = len(library.paged_stash_copy_kernel.launches)
        h.stash((0, 0, 0), 0)
        self.assertEqual(len(library.paged_stash_copy_kernel.launches), launches)
        self.assertEqual([(e.rows, e.device_pages) for e in h.snapshot().entries], [(0, 0)])
        self.assertEqual(h.restore((0, 0, 0))[0], 0)
        self.assertTrue(h.snapshot().status.ok)
        h.stash((0, 0, 1), 1)
        self.assertFalse(h.snapshot().status.ok)

    def test_keys_past_the_decimal_schedule_or_max_keys_are_out_of_range(self):
        h = Harness(self, config(max_keys=2))
        for key, field in (((0, 1000, 0), "layer = 1000"), ((0, 0, 1000), "microbatch = 1000"),
                           ((256, 0, 0), "vp = 256")):
            with self.assertRaises(ok.OutOfRange) as caught:
                h.stash(key, 1)
            self.assertIn(field, str(caught.exception))
        h.stash((0, 999, 999), 1)
        h.stash((255, 0, 0), 1)
        with self.assertRaises(ok.OutOfRange) as caught:
            h.restore((0, 0, 0))
        self.assertIn("max_keys = 2", str(caught.exception))

    def test_library_errors_are_translated_with_their_message(self):
        h = Harness(self, config())
        with mock.patch.object(h.stash_obj.manager, "stash_paged_tensors",
                               side_effect=AssertionError("paged_tensors_to_reload 1 is not "
                                                          "empty")):
            with self.assertRaises(ok.StateError) as caught:
                h.stash((0, 0, 0), 1)
        self.assertIn("PagedStashManager.stash_paged_tensors(1000000)", str(caught.exception))
        self.assertIn("is not empty", str(caught.exception))
        with mock.patch.object(library.PagedTensor, "reload_from_stash",
                               side_effect=RuntimeError("CUDA error: an illegal memory access")):
            h.stash((0, 0, 1), 1)
            with self.assertRaises(ok.CudaError) as caught:
                h.restore((0, 0, 1))
        self.assertIn("PagedTensor.reload_from_stash", str(caught.exception))
        with mock.patch.object(library, "PagedStashBuffer",
                               side_effect=torch.OutOfMemoryError("CUDA out of memory")):
            with self.assertRaises(ok.OutOfMemory) as caught:
                Harness(self, config())
        self.assertIn("allocate_stash_buffers", str(caught.exception))

    def test_close_releases_the_buffers_once(self):
        h = Harness(self, config())
        manager = h.stash_obj.manager
        h.stash_obj.close()
        self.assertIsNone(manager.stash_buffers)
        self.assertIsNone(h.stash_obj.manager)
        h.stash_obj.close()

    def test_a_missing_library_is_named(self):
        with mock.patch.dict(sys.modules, {adapter.MODULE: None}):
            with self.assertRaises(adapters.LibraryMissing) as caught:
                adapter.stash_class()
        self.assertIn("megatron.core.transformer.moe.paged_stash", str(caught.exception))

    def test_the_planted_defect_is_caught(self):
        with mock.patch.dict(os.environ, {"OFFLOADKIT_STANDIN_DEFECT": "stashes_after_overflow"}):
            self.assertIn("a stash after the flag stored", sticky_flag_violation(self))


if __name__ == "__main__":
    unittest.main()
