"""Stand-in of ``megatron.core.pipeline_parallel`` (tests only)."""
