"""Stand-in of TRL (tests only): ``trl.models.activation_offloading.OffloadActivations``."""

__version__ = "0+offloadkit.standin"
