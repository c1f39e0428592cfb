"""PyTorch's own activation offload, ``torch.autograd.graph.save_on_cpu(pin_memory=True)``, checked
by offloadkit's activation battery through the saved-tensor-hooks adapter. PyTorch allocates and
copies itself, so offloadkit's fault injection cannot reach it (no ``executor_allocations``), and
it runs on the cuda executor only (on the CPU its hooks keep tensors in CPU memory: nothing is
offloaded).

    offloadkit check --executor cuda --python examples/python/torch_save_on_cpu.py:make

Its hooks copy each saved tensor to a fresh pinned CPU tensor on the current stream and wait for
the copy (so the source goes back at once), and bring it back with a non-blocking copy to the
device it came from; no prefetch, nothing in flight after pack. So it declares the promises that
follow from that: tensors return to their own device, device memory held for prefetch stays
within any bound (it holds none), and no source stays pending.
"""

import torch

import offloadkit as ok


def make():
    hooks = torch.autograd.graph.save_on_cpu(pin_memory=True)
    activation = ok.saved_tensor_hooks(
        hooks.pack_hook, hooks.unpack_hook, implementation="torch-save-on-cpu",
        capabilities={ok.CUDA_EXECUTOR, "origin_device", "prefetch_bound", "pending_bound"})
    return ok.Plugin(name="torch-save-on-cpu", version=torch.__version__, activation=activation)
