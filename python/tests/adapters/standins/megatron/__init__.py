"""Stand-in of Megatron-LM (tests only): ``megatron.core.pipeline_parallel.
fine_grained_activation_offload`` and ``megatron.core.transformer.moe.paged_stash``."""
