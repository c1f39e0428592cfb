"""offloadkit.torch on a GPU with PyTorch: tensors in a Region keep their contents and address
across pause, resume and swap (a CUDA graph captured over them replays after a resume), pause gives
the device memory back to the driver, a training step under offload_activations computes the
same gradients as without it while holding less device memory after forward, an optimizer's
states offloaded by a TensorSet come back whole after their memory was freed, and a Stash gives
back each key's rows and count. Each comparison is shown to fail on a planted bug.

Run: python test_offloadkit_torch.py (exit status 77, skipped, where PyTorch or a GPU is missing).
"""

import sys
import unittest

SKIP = 77
MIB = 1 << 20


def _why_not() -> str:
    try:
        import torch
    except ImportError as e:
        return f"PyTorch is not importable here ({e})"
    if not torch.cuda.is_available():
        return "PyTorch sees no usable GPU"
    try:
        import offloadkit.optimized  # noqa: F401
        from offloadkit import _native  # noqa: F401
    except ImportError as e:
        return f"offloadkit's extension module is not importable ({e})"
    return ""


class RegionTest(unittest.TestCase):
    def setUp(self):
        import torch

        import offloadkit.torch as okt

        self.torch, self.okt = torch, okt

    def test_contents_and_address_survive_pause(self):
        torch, okt = self.torch, self.okt
        with okt.Region(64 * MIB) as r:
            a = r.tensor((1024, 1024), torch.float32)
            b = r.tensor((3, 5), torch.bfloat16)
            a.copy_(torch.arange(a.numel(), device=a.device, dtype=torch.float32).view(a.shape))
            b.fill_(1.5)
            want_a, want_b, ptr = a.clone(), b.clone(), a.data_ptr()
            self.assertEqual(b.data_ptr() % okt.ALIGNMENT, 0)
            free_active = torch.cuda.mem_get_info()[0]
            r.pause()
            self.assertEqual(r.state, "paused")
            # The region's 64 MiB went back to the driver (a margin for other allocations).
            self.assertGreater(torch.cuda.mem_get_info()[0] - free_active, 48 * MIB)
            r.resume()
            self.assertEqual(a.data_ptr(), ptr)
            self.assertTrue(torch.equal(a, want_a))
            self.assertTrue(torch.equal(b, want_b))

    def test_on_a_stream_of_the_callers_own(self):
        # Work queued on a side stream before pause() is in the copy; the default stream (handle 0
        # in torch, which the cuda executor would refuse) is the other tests' stream.
        torch, okt = self.torch, self.okt
        side = torch.cuda.Stream()
        with okt.Region(32 * MIB) as r:
            x = r.tensor((8 * MIB,), torch.int32)
            with torch.cuda.stream(side):
                x.fill_(5)
                r.pause(stream=side)
                r.resume(stream=side)
                wrong = int((x != 5).sum())
            self.assertEqual(wrong, 0)
        self.assertEqual(okt.as_stream().device, torch.cuda.current_device())
        self.assertNotEqual(int(okt.as_stream(torch.cuda.default_stream())), 0)

    def test_graph_replays_after_resume(self):
        torch, okt = self.torch, self.okt
        with okt.Region(16 * MIB) as r:
            x = r.tensor((4096,), torch.float32)
            x.fill_(1.0)
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.stream(side):
                x.add_(0)  # warm-up outside capture
                with torch.cuda.graph(graph, stream=side):
                    x.mul_(2.0)
            torch.cuda.current_stream().wait_stream(side)
            r.pause()
            r.resume()
            graph.replay()
            torch.cuda.synchronize()
            self.assertTrue(torch.equal(x, torch.full_like(x, 2.0)))

    def test_swap(self):
        torch, okt = self.torch, self.okt
        with okt.Region(32 * MIB) as a, okt.Region(32 * MIB) as b:
            ta, tb = a.tensor((8 * MIB,), torch.int32), b.tensor((8 * MIB,), torch.int32)
            ta.fill_(7)
            tb.fill_(9)
            b.pause()
            a.swap(b)  # a's copy out while b's comes in
            self.assertEqual((a.state, b.state), ("paused", "active"))
            self.assertEqual(int((tb != 9).sum()), 0)
            b.swap(a)
            self.assertEqual(int((ta != 7).sum()), 0)

    def test_errors_name_the_value(self):
        torch, okt = self.torch, self.okt
        from offloadkit.errors import OutOfRange, StateError

        with self.assertRaisesRegex(OutOfRange, "kind 'pinned' is not one of the valid values"):
            okt.Region(MIB, kind="pinned")
        with okt.Region(MIB) as r:
            with self.assertRaisesRegex(OutOfRange, "do not fit: the region holds 1048576 bytes"):
                r.tensor((MIB + 1,), torch.uint8)
            with self.assertRaisesRegex(OutOfRange, "pause mode 'keep' is not one of"):
                r.pause("keep")
        with self.assertRaisesRegex(StateError, "closed"):
            r.pause()


class ActivationTest(unittest.TestCase):
    def setUp(self):
        import torch

        import offloadkit.torch as okt

        self.torch, self.okt = torch, okt
        torch.manual_seed(0)
        h = 1024
        self.model = torch.nn.Sequential(*[torch.nn.Sequential(
            torch.nn.Linear(h, 4 * h), torch.nn.GELU(), torch.nn.Linear(4 * h, h))
            for _ in range(4)]).cuda().to(torch.bfloat16)
        self.x = torch.randn(2048, h, device="cuda", dtype=torch.bfloat16, requires_grad=True)

    def step(self, hooks=None):
        """Gradients of one forward and backward, and the device memory forward added (what the
        caller holds, the gradients of earlier steps among it, is not counted)."""
        torch = self.torch
        self.model.zero_grad(set_to_none=True)
        self.x.grad = None
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        if hooks is None:
            loss = self.model(self.x).float().square().mean()
        else:
            with hooks:
                loss = self.model(self.x).float().square().mean()
            hooks.synchronize()
        torch.cuda.synchronize()
        forward_added = torch.cuda.memory_allocated() - before
        loss.backward()
        torch.cuda.synchronize()
        grads = [p.grad.clone() for p in self.model.parameters()] + [self.x.grad.clone()]
        return grads, forward_added

    def same(self, a, b):
        return all(self.torch.equal(x, y) for x, y in zip(a, b))

    def test_same_gradients_less_memory(self):
        want, held_plain = self.step()
        offload = self.okt.offload_activations(min_bytes=MIB)
        for _ in range(2):  # the second step runs on the pools the first one grew
            got, held_offload = self.step(offload)
            self.assertTrue(self.same(want, got), "gradients differ under offload_activations")
        # Per step, each block saves its input (4 MiB) and the GELU's input and output (16 MiB
        # each): at least 144 MiB offloaded, and no longer held by torch after forward.
        self.assertGreaterEqual(offload.stats().offloaded_bytes, 2 * 144 * MIB)
        self.assertTrue(self.holds_less(held_offload, held_plain), (held_offload, held_plain))
        offload.close()

    @staticmethod
    def holds_less(held_offload, held_plain):
        return held_offload < held_plain - 128 * MIB

    def test_planted_leak_is_caught(self):
        """The memory comparison above fails when the offloaded tensors stay referenced."""
        okt = self.okt
        _, held_plain = self.step()

        class Leaking(okt.offload_activations):
            kept = []

            def _pack(self, t):
                Leaking.kept.append(t)
                return super()._pack(t)

        offload = Leaking(min_bytes=MIB)
        _, held_leaking = self.step(offload)
        self.assertFalse(self.holds_less(held_leaking, held_plain), "a leak went unnoticed")
        Leaking.kept.clear()
        offload.close()

    def test_planted_corruption_is_caught(self):
        """The comparison above fails when an unpacked tensor's contents are wrong."""
        okt = self.okt
        want, _ = self.step()

        class Corrupting(okt.offload_activations):
            def _unpack(self, packed):
                t = super()._unpack(packed)
                return t if t.numel() < 16 else t.clone().index_fill_(0, t.new_zeros(1).long(), 0)

        offload = Corrupting(min_bytes=MIB)
        got, _ = self.step(offload)
        self.assertFalse(self.same(want, got), "a corrupted unpack went unnoticed")
        offload.close()


class TensorSetTest(unittest.TestCase):
    """An optimizer's states: offloaded with their device memory freed, reloaded at new
    addresses with the same contents; the comparison fails when two tensors of one size come
    back swapped (a planted reload in the wrong order)."""

    def setUp(self):
        import torch

        import offloadkit.torch as okt

        self.torch, self.okt = torch, okt
        torch.manual_seed(1)
        model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(),
                                    torch.nn.Linear(4096, 1024)).cuda()
        self.opt = torch.optim.Adam(model.parameters())
        model(torch.randn(64, 1024, device="cuda")).square().mean().backward()
        self.opt.step()
        self.states = [v for st in self.opt.state.values() for v in st.values()
                       if torch.is_tensor(v) and v.is_cuda]

    def test_offload_free_reload(self):
        torch, okt = self.torch, self.okt
        want = [t.clone() for t in self.states]
        with okt.TensorSet(self.states) as s:
            self.assertEqual(s.nbytes, sum(t.numel() * t.element_size() for t in self.states))
            for _ in range(2):  # the second cycle reuses the arena
                before = torch.cuda.memory_allocated()
                s.offload(free=True)
                torch.cuda.synchronize()
                self.assertLessEqual(torch.cuda.memory_allocated(), before - s.nbytes)
                self.assertTrue(s.holds_copy)
                self.assertGreaterEqual(s.host_bytes, s.nbytes)
                s.reload()
                self.assertTrue(all(torch.equal(a, b) for a, b in zip(want, self.states)))
            from offloadkit.errors import OutOfRange

            with self.assertRaisesRegex(OutOfRange, "is a view"):
                okt.TensorSet([want[0][:1]]).offload(free=True)

    def test_planted_swap_is_caught(self):
        torch, okt = self.torch, self.okt
        pair = [t for t in self.states if t.shape == self.states[0].shape][:2]
        self.assertEqual(len(pair), 2)
        want = [t.clone() for t in pair]
        with okt.TensorSet(pair) as s:
            s.offload()
            s._impl.reload(s._buffers()[::-1], okt.as_stream(), event=False)  # planted
            torch.cuda.synchronize()
            self.assertFalse(all(torch.equal(a, b) for a, b in zip(want, pair)))


class StashTest(unittest.TestCase):
    """Rows stashed under two keys come back, the count from the device, the rest of the
    destination untouched; restoring the other key's rows (planted) is caught."""

    def setUp(self):
        import torch

        import offloadkit.torch as okt

        self.torch, self.okt = torch, okt

    def round_trip(self, planted=False):
        torch, okt = self.torch, self.okt
        rows = {(0, 1, 0): 5, (0, 1, 1): 29}
        with okt.Stash((128,), torch.bfloat16, max_rows=32, rows_per_page=8, device_pages=4,
                       pinned_pages=4) as st:
            src = {}
            for i, (key, n) in enumerate(rows.items()):
                src[key] = torch.full((32, 128), float(i + 1), dtype=torch.bfloat16,
                                      device="cuda")
                st.stash(key, src[key], torch.tensor([n], dtype=torch.int64, device="cuda"))
            snap = st.snapshot()
            self.assertEqual(len(snap.entries), 2)
            self.assertEqual(snap.status.code, "ok")
            ok = True
            for key, n in rows.items():
                dst = torch.zeros(32, 128, dtype=torch.bfloat16, device="cuda")
                count = torch.zeros(1, dtype=torch.int64, device="cuda")
                other = [k for k in rows if k != key][0]
                st.restore(other if planted else key, dst, count)  # planted: swapped
                ok = ok and int(count) == n and torch.equal(dst[:n], src[key][:n]) and \
                    int(dst[n:].count_nonzero()) == 0
            self.assertEqual(len(st.snapshot().entries), 0)
            return ok

    def test_the_comparison(self):
        self.assertTrue(self.round_trip())
        self.assertFalse(self.round_trip(planted=True), "a wrong key's rows went by")

    def test_errors_name_the_value(self):
        torch, okt = self.torch, self.okt
        from offloadkit.errors import OutOfRange

        with okt.Stash((4,), torch.float32, max_rows=8, rows_per_page=4, device_pages=2) as st:
            with self.assertRaisesRegex(OutOfRange, r"give a contiguous torch.float32 tensor of "
                                                    r"shape \(8, 4\)"):
                st.stash((0, 0, 0), torch.zeros(4, 4, device="cuda"),
                         torch.zeros(1, dtype=torch.int64, device="cuda"))
            with self.assertRaisesRegex(OutOfRange, "one-element int64 tensor"):
                st.stash((0, 0, 0), torch.zeros(8, 4, device="cuda"), 3)


if __name__ == "__main__":
    why = _why_not()
    if why:
        print(f"skipped: {why}")
        sys.exit(SKIP)
    unittest.main(verbosity=2)
