"""Stand-in of torchtune (tests only): ``torchtune.training.OffloadActivations``."""

__version__ = "0+offloadkit.standin"
