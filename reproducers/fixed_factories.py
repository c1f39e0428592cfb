"""Each defective library with its fix applied, as factories for ``python -m offloadkit check``:
a property that fails on the library and holds here fails because of that defect. This is how
the classifications in CONFORMANCE.md that name a fix were confirmed (unlike the reproducers
beside it, it needs offloadkit: it is the battery run again, on the fixed library).

    python -m offloadkit check reproducers/fixed_factories.py:megatron_fixed --executor cuda

Each factory changes one method of the library, in the checking process only, when the factory
is called, then returns the adapter's own factory's plugin (the same adapter the matrix used):

- ``torchtune_fixed``, ``trl_fixed``: ``OffloadActivations.s0`` reads the current stream, as
  huggingface/trl#7195 made it for TRL, instead of the default stream cached at construction;
- ``megatron_fixed``: ``ChunkOffloadHandler.tensor_pop`` makes the current stream wait for the
  group's offload event before its inline reload, as ``bulk_reload_group`` does
  (NVIDIA/Megatron-LM#7398).
"""

import torch


def _s0_is_the_current_stream(cls):
    cls.s0 = property(lambda self: torch.cuda.current_stream(), lambda self, value: None)


def torchtune_fixed():
    from torchtune.training import _activation_offloading

    from offloadkit.adapters import torchtune

    _s0_is_the_current_stream(_activation_offloading.OffloadActivations)
    return torchtune.make_single_stream()


def trl_fixed():
    from trl.models import activation_offloading

    from offloadkit.adapters import trl

    _s0_is_the_current_stream(activation_offloading.OffloadActivations)
    return trl.make_single_stream()


def megatron_fixed():
    from megatron.core.pipeline_parallel import fine_grained_activation_offload as fgo

    from offloadkit.adapters import megatron

    pop = fgo.ChunkOffloadHandler.tensor_pop

    def tensor_pop(self, tensor_tag):
        if not isinstance(tensor_tag, torch.Tensor) and not fgo.is_graph_capturing():
            self.offload_groups[tensor_tag[0] - 1].wait_offload_event(
                torch.cuda.current_stream())
        return pop(self, tensor_tag)

    fgo.ChunkOffloadHandler.tensor_pop = tensor_pop
    return megatron.make_offload_all()
