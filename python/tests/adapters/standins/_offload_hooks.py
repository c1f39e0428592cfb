"""What the stand-ins of torchtune's and TRL's ``OffloadActivations`` share (tests only), written
from their documented behaviour: a ``saved_tensors_hooks`` whose ``pack_hook`` returns an id and
keeps a tensor smaller than ``min_offload_size`` bytes as it is (an offloaded one is replaced by
its host copy: ``torch.empty_like(activation, device="cpu", pin_memory=use_pin_memory)`` and a
non-blocking ``copy_`` on the current stream, as the libraries' single-stream mode does; an object
that is no tensor, as the mapping tests give, is modelled by its ``nbytes``), and whose
``unpack_hook`` gives the tensor back (a copy: ``.to`` the current device, non-blocking); the
first pack after unpacks began requires every packed tensor to be unpacked. Each object is
recorded in ``instances`` with its arguments, for the adapters' mapping tests."""

from typing import Any, Dict, List, Tuple


class OffloadHooksStandIn:
    #: Every object built, with its keyword arguments.
    instances: List["OffloadHooksStandIn"] = []
    phase_error: type = AssertionError

    def __init__(self, use_pin_memory: bool = True, use_streams: bool = True,
                 max_fwd_stash_size: int = 5, min_offload_size: int = 1024) -> None:
        if use_streams and max_fwd_stash_size < 1:
            raise ValueError(f"max_fwd_stash_size should be at least 1 but is "
                             f"{max_fwd_stash_size}")
        self.kwargs = {"use_pin_memory": use_pin_memory, "use_streams": use_streams,
                       "max_fwd_stash_size": max_fwd_stash_size,
                       "min_offload_size": min_offload_size}
        self.tracker: Dict[int, Tuple[Any, bool]] = {}
        self.tensor_id = 0
        self.in_backward = False
        self.calls: List[Tuple[str, Any]] = []
        type(self).instances.append(self)

        def pack_hook(activation: Any) -> int:
            # The id only: a reference would keep an offloaded source alive.
            self.calls.append(("pack", id(activation)))
            if self.in_backward:
                if self.tracker:
                    raise self.phase_error("backward pass should have cleared tracker of all "
                                           "tensors")
                self.in_backward = False
            self.tensor_id += 1
            if activation.nbytes >= min_offload_size and hasattr(activation, "copy_"):
                import torch

                copy = torch.empty_like(activation, device="cpu", pin_memory=use_pin_memory)
                copy.copy_(activation, non_blocking=True)
                self.tracker[self.tensor_id] = (copy, True)
            elif activation.nbytes >= min_offload_size:
                self.tracker[self.tensor_id] = (("host copy", activation.nbytes), True)
            else:
                self.tracker[self.tensor_id] = (activation, False)
            return self.tensor_id

        def unpack_hook(tensor_id: int) -> Any:
            self.calls.append(("unpack", tensor_id))
            self.in_backward = True
            assert tensor_id in self.tracker, f"untracked tensor with id {tensor_id}"
            value, offloaded = self.tracker.pop(tensor_id)
            if offloaded and hasattr(value, "to"):
                import torch

                return value.to(torch.device("cuda", torch.cuda.current_device()),
                                non_blocking=True)
            return value

        self.pack_hook = pack_hook
        self.unpack_hook = unpack_hook
