"""PyTorch's own activation offload, ``torch.autograd.graph.save_on_cpu``, as an offloadkit
activation implementation.

Written against PyTorch 2.11.0 (``torch/autograd/graph.py``), public API only:
``torch.autograd.graph.save_on_cpu(pin_memory=False, device_type="cuda")``, a
``saved_tensors_hooks`` whose ``pack_hook`` / ``unpack_hook`` the adapter runs. Its pack hook
copies each saved tensor into a fresh CPU tensor (pinned with ``pin_memory=True``) with a
blocking ``copy_`` on the current stream and returns ``(device, cpu_tensor)``; its unpack hook
copies it back with ``cpu_tensor.to(device, non_blocking=pin_memory)``.

Factory
-------
- ``make()``: ``save_on_cpu(pin_memory=True)`` (the setting its documentation recommends for
  speed), one hooks object per battery case, through ``offloadkit.saved_tensor_hooks``'s adapter.

Declared profile, and why
-------------------------
- Every tensor is offloaded (no threshold, no predicate): ``keep_threshold`` 0, each pack counted
  as offloaded.
- ``origin_device``: unpack copies back to the device the tensor was packed from, which the pack
  hook records.
- ``prefetch_bound``: it holds no device memory for prefetch (it has none).
- ``pending_bound``: the pack's copy is blocking, so no source stays pending after pack returns.
- ``cuda_executor`` only: PyTorch allocates and copies itself (on the host executor its hooks keep
  CPU tensors on the CPU: nothing is offloaded), so offloadkit's executor cannot fail its
  allocations (``executor_allocations`` not declared); the driver-fault countdown reaches them.

What the adapter adds: one hooks object per case and the translation of PyTorch's errors, each
with PyTorch's message. Outside the batteries, ``examples/python/torch_save_on_cpu.py`` shows the
same hooks wrapped with ``offloadkit.saved_tensor_hooks`` directly, as a user wraps their own.
"""

from ..protocol import CUDA_EXECUTOR, Plugin
from . import import_library, library_version
from ._offload_activations import hooks_feature

LIBRARY = "torch"
DISTRIBUTION = "torch"
MODULE = "torch.autograd.graph"
CAPABILITIES = frozenset({CUDA_EXECUTOR, "origin_device", "prefetch_bound", "pending_bound"})


def activation(*, pin_memory: bool = True) -> type:
    """The Activation class over ``torch.autograd.graph.save_on_cpu(pin_memory=pin_memory)``."""
    graph = import_library(MODULE, "offloadkit.adapters.torch_save_on_cpu")
    return hooks_feature(graph.save_on_cpu, {"pin_memory": pin_memory},
                         call="torch.autograd.graph.save_on_cpu",
                         implementation="torch-save-on-cpu", capabilities=CAPABILITIES,
                         threshold=0, tracked=False)


def make() -> Plugin:
    """``save_on_cpu(pin_memory=True)``:
    ``python -m offloadkit check offloadkit.adapters.torch_save_on_cpu:make``."""
    torch = import_library(LIBRARY, "offloadkit.adapters.torch_save_on_cpu")
    return Plugin(name="torch-save-on-cpu", version=library_version(torch, DISTRIBUTION),
                  activation=activation())
