"""A stand-in for the part of vLLM that offloadkit's adapter uses (tests only): the sleep-mode
allocator ``vllm.device_allocator.cumem.CuMemAllocator``."""

__version__ = "0+offloadkit.standin"
