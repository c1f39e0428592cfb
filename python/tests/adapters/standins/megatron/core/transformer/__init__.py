"""Stand-in of ``megatron.core.transformer`` (tests only)."""
