"""``torch.autograd.graph`` of the torch stand-in: ``save_on_cpu``, whose hooks do what PyTorch's
documented ones do (pack: a fresh CPU tensor, pinned with ``pin_memory``, and a copy into it;
unpack: the copy moved back to the tensor's device, non-blocking with ``pin_memory``)."""

from typing import Any, Tuple


class save_on_cpu:  # noqa: N801 (PyTorch's name)
    def __init__(self, pin_memory: bool = False, device_type: str = "cuda"):
        import torch

        def pack_to_cpu(tensor: Any) -> Tuple[Any, Any]:
            if not pin_memory:
                return tensor.device, tensor.to("cpu")
            packed = torch.empty(tensor.size(), dtype=tensor.dtype, pin_memory=True)
            packed.copy_(tensor)
            return tensor.device, packed

        def unpack_from_cpu(packed: Tuple[Any, Any]) -> Any:
            device, tensor = packed
            return tensor.to(device, non_blocking=pin_memory)

        self.pack_hook = pack_to_cpu
        self.unpack_hook = unpack_from_cpu
