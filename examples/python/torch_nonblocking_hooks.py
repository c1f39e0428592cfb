"""Saved-tensor hooks that copy with ``non_blocking=True`` on the current stream, as activation
offloaders built for overlap do (torchtune's and TRL's ``OffloadActivations`` copy the same way,
on a stream of their own): pack starts a device-to-pinned copy and returns at once, unpack starts
the copy back. The source must not be reused until its copy has completed; PyTorch's caching
allocator guarantees that in stream order, and so does offloadkit's saved-tensor adapter, which
hands a source back only once an event recorded after the copy has completed.

    offloadkit check --executor cuda --python examples/python/torch_nonblocking_hooks.py:make

The copies stay in flight after pack, so it does not promise ``pending_bound`` unless
``max_pending_bytes`` makes the adapter wait (it does: pack waits for the oldest copies while
more than the bound is held).
"""

import torch

import offloadkit as ok


def pack_hook(tensor):
    packed = torch.empty(tensor.size(), dtype=tensor.dtype, layout=tensor.layout,
                         pin_memory=True)
    packed.copy_(tensor, non_blocking=True)
    return tensor.device, packed


def unpack_hook(saved):
    device, packed = saved
    return packed.to(device, non_blocking=True)


def make():
    activation = ok.saved_tensor_hooks(
        pack_hook, unpack_hook, implementation="torch-nonblocking-hooks",
        capabilities={ok.CUDA_EXECUTOR, "origin_device", "prefetch_bound", "pending_bound"})
    return ok.Plugin(name="torch-nonblocking-hooks", version=torch.__version__,
                     activation=activation)
