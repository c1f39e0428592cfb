"""What the adapters of saved-tensor-hooks libraries (torchtune's and TRL's ``OffloadActivations``,
PyTorch's ``save_on_cpu``) share: the library's hooks driven through
``offloadkit.saved_tensor_hooks``'s adapter, one library object per battery case, the library's
errors translated, and, where the library records it (``tracker``), each pack's decision
(offloaded or kept) reported in ``stats()``."""

from typing import Any, Callable, Dict, FrozenSet, Tuple

from ..errors import StateError
from ..hooks import _HooksActivation
from ..protocol import Plugin
from . import Unsupported, import_library, library_call, library_version

#: Why ``use_streams=True`` cannot be driven through offloadkit's activation protocol.
STREAMS_NEED_AUTOGRAD = (
    "OffloadActivations(use_streams=True) cannot be driven through offloadkit's activation "
    "protocol: its unpack hook reads torch._C._current_graph_task_id() and "
    "torch._C._current_autograd_node(), registers a hook on that node (node.register_hook) and "
    "an end-of-backward callback (Variable._execution_engine.queue_callback); all of them exist "
    "only while autograd's engine runs a backward pass, and the protocol calls pack and unpack "
    "directly, with no autograd graph and no forward/backward phase (offloadkit issue 31, item "
    "4). Check use_streams=False (make_single_stream) instead.")


def offload_activations_factories(*, library: str, distribution: str, module: str,
                                  adapter: str, implementation: str,
                                  capabilities: FrozenSet[str]) -> Tuple[Callable[..., type],
                                                                         Callable[[], Any],
                                                                         Callable[[], Any]]:
    """The three factories of an adapter over an ``OffloadActivations`` class (torchtune's, TRL's):
    ``activation(**arguments)``, the Activation class over ``module.OffloadActivations`` with the
    library's arguments; ``make()``, the library's defaults (``use_streams=True``), which raises
    Unsupported naming what the protocol lacks; and ``make_single_stream()``, ``use_streams=False``
    as a Plugin named ``library`` with ``distribution``'s version. ``adapter`` is the adapter's
    module, named in import errors and in the factories' text."""
    call = f"{module}.OffloadActivations"
    def activation(*, use_pin_memory: bool = True, min_offload_size: int = 1024,
                   use_streams: bool = False) -> type:
        if use_streams:
            raise Unsupported(STREAMS_NEED_AUTOGRAD)
        library_module = import_library(module, adapter)
        return hooks_feature(
            library_module.OffloadActivations,
            {"use_pin_memory": use_pin_memory, "use_streams": False,
             "min_offload_size": min_offload_size},
            call=call, implementation=implementation, capabilities=capabilities,
            threshold=min_offload_size)

    def make() -> Any:
        import_library(library, adapter)
        raise Unsupported(STREAMS_NEED_AUTOGRAD)

    def make_single_stream() -> Any:
        feature = activation()
        top = import_library(library, adapter)
        return Plugin(name=library, version=library_version(top, distribution), activation=feature)

    activation.__doc__ = (f"The Activation class over ``{call}`` with these arguments "
                          "(``use_streams=True`` raises Unsupported, see the module's text).")
    make.__doc__ = ("The library's defaults (``use_streams=True``): raises Unsupported, naming "
                    "what the protocol lacks.")
    make_single_stream.__doc__ = (f"``OffloadActivations(use_streams=False)``: ``python -m "
                                  f"offloadkit check {adapter}:make_single_stream``.")
    return activation, make, make_single_stream


def hooks_feature(library_class: Callable[..., Any], kwargs: Dict[str, Any], *, call: str,
                  implementation: str, capabilities: FrozenSet[str], threshold: int,
                  tracked: bool = True) -> type:
    """An Activation class that builds ``library_class(**kwargs)`` per case and runs its
    ``pack_hook`` / ``unpack_hook``. ``call`` names the library call in translated errors;
    ``threshold`` is the keep threshold the battery reads (the library's ``min_offload_size``, 0
    for one that offloads every tensor); ``tracked``: each pack's decision is read from the
    library's ``tracker`` (``offloaded``), else every pack counts as offloaded."""
    if kwargs.get("use_streams", False):
        raise Unsupported(STREAMS_NEED_AUTOGRAD)

    class OffloadActivationsHooks(_HooksActivation):
        def __init__(self, executor: Any, options: Any):
            super().__init__(executor, options)
            self.keep_threshold = threshold
            with library_call(f"{call}({_arguments(kwargs)})"):
                self.library = library_class(**kwargs)

        def pack_hook(self, tensor: Any) -> Any:
            with library_call(f"{call}.pack_hook"):
                return self.library.pack_hook(tensor)

        def unpack_hook(self, packed: Any) -> Any:
            with library_call(f"{call}.unpack_hook"):
                return self.library.unpack_hook(packed)

        def pack(self, tensor: Any, stream: Any) -> int:
            handle = super().pack(tensor, stream)
            packed = self._packed[handle][0]
            if tracked and not offloaded(self.library, packed):
                self._stats.offloaded_bytes -= tensor.nbytes
                self._stats.kept += 1
            return handle

    OffloadActivationsHooks.__name__ = OffloadActivationsHooks.__qualname__ = implementation
    OffloadActivationsHooks.implementation = implementation
    OffloadActivationsHooks.capabilities = capabilities
    return OffloadActivationsHooks


def offloaded(library: Any, tensor_id: Any) -> bool:
    """The library's own record of its decision for the pack that returned ``tensor_id``: both
    libraries keep ``tracker[tensor_id] = (tensor, modified, ...)``, ``modified`` True where the
    tensor was copied to the CPU, False where it was kept as it is (too small, a parameter or
    buffer, a storage already tracked). Read there rather than inferred from whether the source
    is still referenced, which a zero-element tensor (no memory) cannot tell."""
    tracker = getattr(library, "tracker", None)
    entry = tracker.get(tensor_id) if isinstance(tracker, dict) else None
    if not isinstance(entry, tuple) or len(entry) < 2:
        raise StateError(f"the library's tracker has no (tensor, modified, ...) entry for the "
                         f"tensor id {tensor_id!r} its pack_hook returned (tracker entry: "
                         f"{entry!r})")
    return bool(entry[1])


def _arguments(kwargs: Dict[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in sorted(kwargs.items()))
