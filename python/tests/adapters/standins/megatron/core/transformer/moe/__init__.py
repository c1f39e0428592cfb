"""Stand-in of ``megatron.core.transformer.moe`` (tests only)."""
