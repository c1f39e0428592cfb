"""``torch.autograd`` of the torch stand-in: ``graph.save_on_cpu`` only."""

from . import graph  # noqa: F401
