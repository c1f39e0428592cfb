"""A stand-in for ``offloadkit.optimized:make`` in the measuring-path tests, where neither the
extension module nor a GPU exists: torch_memory_saver's adapter (``retain_cpu_backup``) and TRL's
single-stream adapter over the stand-in libraries, the region given a ``swap_with`` (what
offloadkit's own region adds to the protocol) that counts its calls."""

import offloadkit as ok
from offloadkit.adapters import torch_memory_saver, trl


class SwapRegion(torch_memory_saver.TorchMemorySaverRegion):
    """A region with offloadkit's phase switch: pauses itself, then resumes ``other``."""

    swaps = 0

    def swap_with(self, other, mode, stream):
        if not isinstance(other, SwapRegion):
            raise ok.OutOfRange(f"swap_with: {other!r} is not a region of this implementation")
        SwapRegion.swaps += 1
        self.pause(mode, stream)
        other.resume(stream)


def make():
    torch_memory_saver.make_retain_cpu_backup()
    return ok.Plugin(name="offloadkit-standin", region=SwapRegion,
                     activation=trl.make_single_stream().activation)
