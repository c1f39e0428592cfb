"""A plain PyTorch stash, the way one is first written: one ``torch.empty`` per key holding exactly
its rows, copies on the current stream (offloadkit's stream, as ``torch.cuda.ExternalStream``),
the row count read back on the host. offloadkit's stash battery checks it on a GPU:

    offloadkit check --executor cuda --python examples/python/torch_stash.py:make

The pools' tiers are bookkeeping only (every byte lives in device memory), kept as offloadkit's
stash contract says: a key of r rows takes ceil(r / rows_per_page) pages, device pages first; a
key that does not fit is dropped and recorded in the sticky status word.
"""

import contextlib

import torch

import offloadkit as ok


class TorchStash(ok.Stash):
    implementation = "torch-per-key"
    # PyTorch allocates and copies itself: the GPU only, and offloadkit's fault injection cannot
    # reach it.
    capabilities = {ok.CUDA_EXECUTOR}

    def __init__(self, executor, config, stream):
        self.ex = executor
        self.cfg = config
        self.cuda = executor.backend == "cuda"
        self.device = torch.device("cuda", config.device) if self.cuda else torch.device("cpu")
        self.entries = {}  # key code -> (key, rows, data, device pages, pinned pages)
        self.codes = set()
        self.free_device = config.device_pages
        self.free_pinned = config.pinned_pages
        self.status = ok.StashStatus()

    def _note(self, key):
        return ok.Stash.note_key(self.codes, key, self.cfg.max_keys)

    def _fail(self, code, key, rows, needed):
        if self.status.ok:
            self.status = ok.StashStatus(code, key, rows, needed, self.free_device,
                                         self.free_pinned)

    def _bytes(self, buffer):
        """The buffer's bytes as a uint8 tensor over the same memory."""
        if self.cuda:
            return torch.as_tensor(buffer, device=self.device)
        return torch.from_numpy(buffer.numpy())

    def _on(self, stream):
        """PyTorch's current stream is ``stream``; on the host executor (CPU tensors) the
        stream's queued work is waited for instead, before the host touches its buffers."""
        if self.cuda:
            return torch.cuda.stream(ok.torch_stream(stream))
        self.ex.synchronize(stream)
        return contextlib.nullcontext()

    def _wait(self, stream):
        if self.cuda:
            ok.torch_stream(stream).synchronize()
        else:
            self.ex.synchronize(stream)

    def stash(self, key, src, rows, stream):
        code = self._note(key)
        with self._on(stream):
            r = int(self._bytes(rows).view(torch.int64)[0].item())  # waits for the stream
            if r > self.cfg.max_rows:
                return self._fail("rows_too_large", key, r, 0)
            need = self.cfg.pages_for(r)
            if code in self.entries:
                return self._fail("double_stash", key, r, need)
            if need > self.free_device + self.free_pinned:
                return self._fail("overflow", key, r, need)
            n = r * self.cfg.row_bytes
            data = torch.empty(n, dtype=torch.uint8, device=self.device)
            data.copy_(self._bytes(src)[:n])
        on_device = min(need, self.free_device)
        self.free_device -= on_device
        self.free_pinned -= need - on_device
        self.entries[code] = (ok.StashKey(*key), r, data, on_device, need - on_device)

    def restore(self, key, dst, rows_out, stream):
        code = self._note(key)
        with self._on(stream):
            entry = self.entries.pop(code, None)
            if entry is None:
                self._fail("restore_empty", key, 0, 0)
                if rows_out is not None:
                    self._bytes(rows_out).view(torch.int64).fill_(0)
                return
            _, r, data, on_device, pinned = entry
            self._bytes(dst)[:data.numel()].copy_(data)
            if rows_out is not None:
                self._bytes(rows_out).view(torch.int64).fill_(r)
        # `data` goes back to PyTorch's caching allocator, which reuses it in the order of the
        # stream it was allocated on: this one, after the copy just issued.
        self.free_device += on_device
        self.free_pinned += pinned

    def reset(self, stream):
        self._wait(stream)
        self.entries.clear()
        self.free_device = self.cfg.device_pages
        self.free_pinned = self.cfg.pinned_pages
        self.status = ok.StashStatus()

    def clear_status(self, stream):
        self._wait(stream)
        self.status = ok.StashStatus()

    def snapshot(self, stream):
        entries = [ok.StashEntry(key, rows, dev, pin) for key, rows, _, dev, pin in
                   self.entries.values()]
        return ok.StashSnapshot(self.free_device, self.free_pinned, entries, self.status)

    def close(self):
        self.entries.clear()


def make():
    return ok.Plugin(name="torch-stash", version=torch.__version__, stash=TorchStash)
