"""Megatron-LM fine-grained activation offloading: ``ChunkOffloadHandler.tensor_pop`` of a tensor
whose group was offloaded but not yet reloaded by ``bulk_reload_group`` reloads it inline on the
current stream (``reload()``: ``gpu_tensor.copy_(cpu_backup, non_blocking=True)``) with no wait
for the group's offload event on ``d2h_stream``. The host-to-device copy reads the pinned host
buffer while the device-to-host copy that fills it is still running: the tensor comes back stale.
Upstream: NVIDIA/Megatron-LM issue 7398.

    python3 megatron_tensor_pop_reload_race.py [MIB]

One group of one tensor (MIB MiB, default 64) is written by a producer still busy on the compute
stream, offloaded at its group's commit, then popped at once, as backward does when it reaches a
group before a prefetch reloaded it (every group of the warmup iteration is offloaded, the last
one too). The D2H copy waits for the compute stream; the inline H2D copy is queued on it, after
the same work, and nothing orders the two.
Exit status 1: reproduced (the popped tensor differs from the pushed one); 0: not reproduced; 2:
it cannot run here.
"""

import sys


def main() -> int:
    try:
        import torch
        from megatron.core.pipeline_parallel import fine_grained_activation_offload as fgo
    except ImportError as e:
        print(f"cannot run here: {e}")
        return 2
    if not torch.cuda.is_available():
        print("cannot run here: no CUDA device")
        return 2
    mib = int(sys.argv[1]) if len(sys.argv) > 1 else 64
    interface = fgo.FineGrainedActivationOffloadingInterface
    interface.reset_instance()
    interface.init_chunk_handler(pp_rank=0, vp_size=1, vp_stage=None,
                                 min_offloaded_tensor_size=1,
                                 delta_offload_bytes_across_pp_ranks=0,
                                 activation_offload_fraction=1.0)
    manager = fgo.PipelineOffloadManager.get_instance()
    chunk = manager.pop_forward_chunk(name="core_attn")
    chunk.on_group_start_forward("core_attn")
    x = torch.zeros(mib << 20, dtype=torch.uint8, device="cuda")
    expected = torch.randint(0, 255, (mib << 20,), dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    torch.cuda._sleep(500_000_000)  # the producer is still busy on the compute stream ...
    x.copy_(expected)  # ... when it writes the activation
    tag = chunk.tensor_push(x)
    chunk.on_group_commit_forward("core_attn", [])  # the group's D2H copy, on d2h_stream
    del x
    y = chunk.tensor_pop(tag)  # backward reaches the group before any reload
    torch.cuda.synchronize()
    wrong = int((y != expected).sum())
    print(f"{wrong} of {expected.numel()} bytes of the popped tensor differ from the pushed one")
    print("REPRODUCED" if wrong else "not reproduced")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
