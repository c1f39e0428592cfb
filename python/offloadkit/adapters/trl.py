"""TRL's ``OffloadActivations`` (the successor of torchtune's) as an offloadkit activation
implementation.

Written against huggingface/trl commit f2cd57710ae345ea6428ae95363267fcf38a3dc8 (2026-07-24),
``trl/models/activation_offloading.py``, public API only:
``trl.models.activation_offloading.OffloadActivations(use_pin_memory=True, use_streams=True,
min_offload_size=1024, max_fwd_stash_size=5)``, a ``torch.autograd.graph.saved_tensors_hooks``
whose ``pack_hook`` / ``unpack_hook`` the adapter runs.

Factories
---------
- ``make()``: the library's defaults, ``use_streams=True``. It raises ``Unsupported`` for the
  reason torchtune's does (``offloadkit.adapters.torchtune``): that mode's unpack hook needs
  autograd's engine running a backward pass (graph task id, current autograd node, node hooks,
  ``queue_callback``), and offloadkit's activation protocol has no autograd graph and no
  forward/backward phase (offloadkit issue 31, item 4).
- ``make_single_stream()``: ``OffloadActivations(use_streams=False)`` through
  ``offloadkit.saved_tensor_hooks``'s adapter, one library object per battery case.

Declared profile (``make_single_stream``), and why
--------------------------------------------------
- Offload decision ``opaque_predicate``: besides the ``min_offload_size`` threshold, a tensor
  whose storage (data pointer plus offset, and dtype) an earlier pack of the same forward pass
  tracks is kept on the device rather than copied again, and so are CPU tensors, parameters,
  buffers, TorchAO FP8 tensors and tensors over the storage of a registered parameter. Each
  decision is reported in ``stats()``, as the library records it (``tracker[id][1]``: copied,
  or kept as it is).
- Not ``dedup_by_storage``: a storage saved twice is not unpacked from one host copy; its second
  pack keeps the device tensor itself, which the opaque predicate reports as kept.
- Return device ``current`` (``origin_device`` not declared): unpack copies to the current
  accelerator device.
- ``cuda_executor`` only: PyTorch allocates and copies itself.

What the battery will see that is the library's design: the copies run on ``s0``, the device's
default stream (``torch.cuda.default_stream()``), which does not wait for the stream a tensor
was produced on; the first pack after unpacks began raises ``ValueError("Backward pass should
have cleared tracker of all tensors")`` unless every packed tensor was unpacked (``LogicError``).

What the adapter adds: one library object per case, the keep/offload report in ``stats()``, and
the translation of the library's errors, each with the library's message.
"""

from typing import Any

from ..protocol import CUDA_EXECUTOR, Plugin
from . import Unsupported, import_library, library_version
from ._offload_activations import STREAMS_NEED_AUTOGRAD, hooks_feature

LIBRARY = "trl"
DISTRIBUTION = "trl"
MODULE = "trl.models.activation_offloading"
COMMIT = "f2cd57710ae345ea6428ae95363267fcf38a3dc8"
CAPABILITIES = frozenset({CUDA_EXECUTOR, "opaque_predicate"})


def activation(*, use_pin_memory: bool = True, min_offload_size: int = 1024,
               use_streams: bool = False) -> type:
    """The Activation class over TRL's ``OffloadActivations`` with these arguments
    (``use_streams=True`` raises Unsupported)."""
    if use_streams:
        raise Unsupported(STREAMS_NEED_AUTOGRAD)
    module = import_library(MODULE, "offloadkit.adapters.trl")
    return hooks_feature(
        module.OffloadActivations,
        {"use_pin_memory": use_pin_memory, "use_streams": False,
         "min_offload_size": min_offload_size},
        call="trl.models.activation_offloading.OffloadActivations", implementation="trl-offload",
        capabilities=CAPABILITIES, threshold=min_offload_size)


def _plugin(feature: Any) -> Plugin:
    library = import_library(LIBRARY, "offloadkit.adapters.trl")
    return Plugin(name="trl", version=library_version(library, DISTRIBUTION), activation=feature)


def make() -> Plugin:
    """The library's defaults (``use_streams=True``): raises Unsupported, naming what the
    protocol lacks."""
    import_library(LIBRARY, "offloadkit.adapters.trl")
    raise Unsupported(STREAMS_NEED_AUTOGRAD)


def make_single_stream() -> Plugin:
    """``OffloadActivations(use_streams=False)``:
    ``python -m offloadkit check offloadkit.adapters.trl:make_single_stream``."""
    return _plugin(activation())
