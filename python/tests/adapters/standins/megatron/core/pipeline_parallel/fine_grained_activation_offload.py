"""A stand-in for Megatron-LM's fine-grained activation offloading (tests only), written from its
documented public behaviour (``docs/user-guide/features/fine_grained_activation_offloading.md``
and the public names of ``megatron/core/pipeline_parallel/fine_grained_activation_offload.py``);
none of Megatron's code.

``PipelineOffloadManager`` is a process-wide singleton (``get_instance``, ``reset_instance``);
``init_model_chunk_offload_handler`` makes a ``ChunkOffloadHandler`` for one model chunk (a
microbatch), its current forward chunk, and queues it for backward. A chunk's forward is a
sequence of groups: ``on_group_start_forward(name)`` opens one, ``tensor_push(tensor)`` records a
tensor in it and returns a tag ``(group index, position)`` (a tensor that is not on the GPU, or a
parameter, comes back as it is), ``on_group_commit_forward(name, forced_released_tensors)``
copies to host each recorded tensor that ``tensor_need_offloading_checker`` accepts (at least
``min_offloaded_tensor_size`` elements) and drops the group's reference to it. In backward,
``on_group_commit_backward(name)`` makes the chunk the current backward chunk (asserting it is)
and ``on_group_start_backward()`` reloads the last offloaded group not reloaded yet;
``tensor_pop(tag)`` returns the tensor, reloading it first where it is still on the host.

Tensors are the tests' objects with ``nbytes``, ``numel()``, ``device.type`` and ``payload`` (the
bytes); a host copy is ``(device, payload, nbytes)``, a reloaded tensor a new object of the same
attributes. Every call is appended to the chunk's ``calls``.

Planted defect (tests only): with ``OFFLOADKIT_STANDIN_DEFECT=reload_drops_last_byte`` in the
environment, a reload zeroes the last byte of the tensor it brings back.
"""

import os
import types
from collections import deque
from typing import Any, Dict, List, Optional, Tuple


class OffloadTensorGroup:
    """The tensors of one group, by tag."""

    def __init__(self, name: str):
        self._name = name
        self._tensors: Dict[Tuple[int, int], Any] = {}
        self.offload = True


class ChunkOffloadHandler:
    def __init__(self, min_offloaded_tensor_size: int, cpu_tensor_pool: Any,
                 max_inflight_offloads: Optional[int] = None):
        self.min_offloaded_tensor_size = min_offloaded_tensor_size
        self.cpu_tensor_pool = cpu_tensor_pool
        self.offload_groups: List[OffloadTensorGroup] = []
        self._offloaded_group_index = 0
        self._tensor_count_current_group = 0
        self._groups_to_offload: List[OffloadTensorGroup] = []
        self._groups_to_reload: List[OffloadTensorGroup] = []
        self.d2h_stream = PipelineOffloadManager.get_instance().d2h_stream
        self.h2d_stream = PipelineOffloadManager.get_instance().h2d_stream
        self.do_offload = True
        self.is_warmup = True
        self.calls: List[Tuple[str, Any]] = []

    @staticmethod
    def _manageable(tensor: Any) -> bool:
        return getattr(tensor, "device", None) is not None and tensor.device.type == "cuda" \
            and not getattr(tensor, "is_parameter", False)

    def tensor_need_offloading_checker(self, tensor: Any) -> bool:
        return self._manageable(tensor) and tensor.numel() >= self.min_offloaded_tensor_size \
            and not getattr(tensor, "_do_not_offload", False)

    def tensor_push(self, tensor: Any) -> Any:
        self.calls.append(("tensor_push", id(tensor)))
        if not self._manageable(tensor):
            return tensor
        tag = (self._offloaded_group_index, self._tensor_count_current_group)
        self._tensor_count_current_group += 1
        self.offload_groups[self._offloaded_group_index - 1]._tensors[tag] = tensor
        return tag

    def tensor_pop(self, tag: Any) -> Any:
        self.calls.append(("tensor_pop", tag))
        if not isinstance(tag, tuple):
            return tag
        tensor = self.offload_groups[tag[0] - 1]._tensors.pop(tag)
        if isinstance(tensor, tuple):
            tensor = self._reload(tensor)
        return tensor

    def _reload(self, state: Tuple[Any, bytes, int]) -> Any:
        device, payload, nbytes = state
        if os.environ.get("OFFLOADKIT_STANDIN_DEFECT") == "reload_drops_last_byte" and payload:
            payload = payload[:-1] + b"\0"
        return types.SimpleNamespace(device=device, payload=payload, nbytes=nbytes,
                                     numel=lambda: nbytes)

    def on_group_start_forward(self, name: str) -> None:
        self.calls.append(("on_group_start_forward", name))
        self._offloaded_group_index += 1
        self.offload_groups.append(OffloadTensorGroup(name))
        self._tensor_count_current_group = 0
        self._groups_to_offload.append(self.offload_groups[-1])

    def on_group_commit_forward(self, name: str, forced_released_tensors: List[Any]) -> None:
        self.calls.append(("on_group_commit_forward", name, list(forced_released_tensors)))
        group = next((g for g in self._groups_to_offload if g._name == name), None)
        assert group is not None, f"Group {name} not found in {self._groups_to_offload}"
        self._groups_to_reload.append(group)
        for tag, tensor in list(group._tensors.items()):
            if self.tensor_need_offloading_checker(tensor):
                group._tensors[tag] = (tensor.device, bytes(tensor.payload), tensor.nbytes)
        self._groups_to_offload.remove(group)

    def on_group_start_backward(self) -> None:
        self.calls.append(("on_group_start_backward",))
        if self._groups_to_reload:
            group = self._groups_to_reload.pop()
            for tag, state in list(group._tensors.items()):
                if isinstance(state, tuple):
                    group._tensors[tag] = self._reload(state)

    def on_group_commit_backward(self, name: str) -> None:
        self.calls.append(("on_group_commit_backward", name))
        manager = PipelineOffloadManager.get_instance()
        if manager.cur_backward_chunk() is not self:
            manager.pop_backward_chunk(name)
        assert manager.cur_backward_chunk() is self, \
            f"Chunk mismatch {manager.cur_backward_chunk()} {self}"


class PipelineOffloadManager:
    OFFLOAD_MGR: Optional["PipelineOffloadManager"] = None

    @classmethod
    def get_instance(cls) -> "PipelineOffloadManager":
        if cls.OFFLOAD_MGR is None:
            cls.OFFLOAD_MGR = PipelineOffloadManager()
        return cls.OFFLOAD_MGR

    @classmethod
    def reset_instance(cls) -> None:
        cls.OFFLOAD_MGR = None
        cls.OFFLOAD_MGR = PipelineOffloadManager()

    def __init__(self) -> None:
        self.d2h_stream = object()
        self.h2d_stream = object()
        self._queue: deque = deque()
        self._cached_chunks_backward: List[ChunkOffloadHandler] = []
        self._cur_forward_chunk: Optional[ChunkOffloadHandler] = None
        self._cur_backward_chunk: Optional[ChunkOffloadHandler] = None

    def init_model_chunk_offload_handler(self, pp_rank: int, vp_size: Optional[int],
                                         vp_stage: Optional[int],
                                         min_offloaded_tensor_size: int = 1024 * 1024,
                                         delta_offload_bytes_across_pp_ranks: int = 0,
                                         activation_offload_fraction: float = 1.0,
                                         max_inflight_offloads: Optional[int] = None) -> None:
        chunk = ChunkOffloadHandler(min_offloaded_tensor_size, None,
                                    max_inflight_offloads=max_inflight_offloads)
        self._queue.append(chunk)
        self._cached_chunks_backward.append(chunk)
        self._cur_forward_chunk = chunk

    def cur_forward_chunk(self) -> Optional[ChunkOffloadHandler]:
        return self._cur_forward_chunk

    def pop_forward_chunk(self, name: Optional[str] = None) -> Optional[ChunkOffloadHandler]:
        return self._cur_forward_chunk

    def cur_backward_chunk(self) -> Optional[ChunkOffloadHandler]:
        return self._cur_backward_chunk

    def pop_backward_chunk(self, name: Optional[str] = None) -> None:
        self._cur_backward_chunk = next(
            (c for c in self._cached_chunks_backward
             if any(g._name == name for g in c.offload_groups)), None)
        assert self._cur_backward_chunk is not None, "No non-empty chunk found"


class FineGrainedActivationOffloadingInterface:
    @staticmethod
    def init_chunk_handler(pp_rank: int, vp_size: Optional[int], vp_stage: Optional[int],
                           min_offloaded_tensor_size: int,
                           delta_offload_bytes_across_pp_ranks: int,
                           activation_offload_fraction: float,
                           max_inflight_offloads: Optional[int] = None) -> None:
        PipelineOffloadManager.get_instance().init_model_chunk_offload_handler(
            pp_rank, vp_size, vp_stage, min_offloaded_tensor_size,
            delta_offload_bytes_across_pp_ranks, activation_offload_fraction,
            max_inflight_offloads=max_inflight_offloads)

    @staticmethod
    def reset_instance() -> None:
        PipelineOffloadManager.reset_instance()
