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

from ..protocol import CUDA_EXECUTOR
from ._offload_activations import offload_activations_factories

LIBRARY = "trl"
DISTRIBUTION = "trl"
MODULE = "trl.models.activation_offloading"
COMMIT = "f2cd57710ae345ea6428ae95363267fcf38a3dc8"
CAPABILITIES = frozenset({CUDA_EXECUTOR, "opaque_predicate"})

activation, make, make_single_stream = offload_activations_factories(
    library=LIBRARY, distribution=DISTRIBUTION, module=MODULE,
    adapter="offloadkit.adapters.trl",
    implementation="trl-offload", capabilities=CAPABILITIES)
