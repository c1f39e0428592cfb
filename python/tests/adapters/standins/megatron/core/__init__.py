"""Stand-in of ``megatron.core`` (tests only): its version."""

__version__ = "0+offloadkit.standin"
