"""torchtune's ``OffloadActivations`` as an offloadkit activation implementation.

Written against pytorch/torchtune commit bd2a0fc7c31430972728494fa01aaeeb0ebf1ba1 (2026-04-23),
``torchtune/training/_activation_offloading.py``, public API only:
``torchtune.training.OffloadActivations(use_pin_memory=True, use_streams=True,
max_fwd_stash_size=5, min_offload_size=1024)``, a ``torch.autograd.graph.saved_tensors_hooks``
whose ``pack_hook`` / ``unpack_hook`` the adapter runs.

Factories
---------
- ``make()``: the library's defaults, ``use_streams=True``. It raises ``Unsupported``: in that
  mode the unpack hook needs autograd's engine to be running a backward pass
  (``torch._C._current_graph_task_id()``, ``torch._C._current_autograd_node()``,
  ``node.register_hook`` and ``Variable._execution_engine.queue_callback``), which offloadkit's
  activation protocol does not provide: it calls pack and unpack directly, with no autograd graph
  and no forward/backward phase (offloadkit issue 31, item 4). Faking those calls would check
  something other than the library.
- ``make_single_stream()``: ``OffloadActivations(use_streams=False)``, whose hooks need no
  autograd state, through ``offloadkit.saved_tensor_hooks``'s adapter (one library object per
  battery case).

Declared profile (``make_single_stream``), and why
--------------------------------------------------
- Offload decision ``size_threshold`` with ``keep_threshold = min_offload_size``: a tensor of at
  least ``min_offload_size`` bytes on the accelerator that is not a parameter or buffer is copied
  to (pinned) CPU memory; a smaller one is kept as it is. The battery's tensors are never
  parameters, so the rule it sees is the size threshold; each decision is also reported in
  ``stats()``, as the library records it (``tracker[id][1]``: copied, or kept as it is).
- Return device ``current`` (``origin_device`` not declared): unpack copies to
  ``torch.accelerator.current_accelerator()``, the current device, not the tensor's own.
- No ``prefetch_bound`` / ``pending_bound`` / ``backward_prefetch`` promises: the library
  declares none of them.
- ``cuda_executor`` only: PyTorch allocates and copies itself.

What the battery will see that is the library's design
------------------------------------------------------
- Streams: the single-stream hooks copy on ``s0``, the stream that was current when the object
  was built (the device's default stream here), not on the stream the tensor was produced on, and
  do not make ``s0`` wait for that stream. Code that computes on another stream gets copies that
  race its writes.
- Phases: the first pack after unpacks began asserts that every packed tensor was unpacked
  ("backward pass should have cleared tracker of all tensors"); a sequence that packs again after
  a partial unpack fails with that message (``StateError``).

What the adapter adds: one library object per case, the keep/offload report in ``stats()``, and
the translation of the library's errors (``AssertionError`` as ``StateError``, ``ValueError`` as
``LogicError``, PyTorch's out-of-memory error as ``OutOfMemory``), each with the library's message.
"""

from ..protocol import CUDA_EXECUTOR
from ._offload_activations import offload_activations_factories

LIBRARY = "torchtune"
DISTRIBUTION = "torchtune"
COMMIT = "bd2a0fc7c31430972728494fa01aaeeb0ebf1ba1"
CAPABILITIES = frozenset({CUDA_EXECUTOR})

activation, make, make_single_stream = offload_activations_factories(
    library=LIBRARY, distribution=DISTRIBUTION, module="torchtune.training",
    adapter="offloadkit.adapters.torchtune",
    implementation="torchtune-offload", capabilities=CAPABILITIES)
