"""Stand-in of ``vllm.device_allocator`` (tests only)."""
