"""Planted bugs: the NumPy implementations of numpy_offload.py with one bug each, which
`offloadkit check --python` must catch with a seed and a reproduce line. Each planted class
declares the capabilities of the implementation it derives from.

    offloadkit check --executor host --python examples/python/numpy_planted.py:stash
"""

import offloadkit as ok
from numpy_offload import NumpyActivation, NumpyArena, NumpyRegion, NumpyStash


class PlantedStash(NumpyStash):
    """restore() writes a zero over the first byte of the buffer it restores into."""

    implementation = "numpy-planted"

    def restore(self, key, dst, rows_out, stream):
        super().restore(key, dst, rows_out, stream)
        if dst.nbytes:
            self.ex.fill(dst, 0, 1, stream)  # the planted bug


class PlantedRegion(NumpyRegion):
    """resume() loses the first byte of the contents."""

    implementation = "numpy-planted"

    def resume(self, stream):
        super().resume(stream)
        self.ex.fill(self.memory, 0, 1, stream)  # the planted bug


class PlantedArena(NumpyArena):
    """reload() copies every tensor but the last (an off-by-one over the copies)."""

    implementation = "numpy-planted"

    def _copies_back(self, tensors):
        runs = super()._copies_back(tensors)
        if runs:  # the planted bug: the last tensor is left out
            first, last, offset, nbytes = runs[-1]
            if first == last:
                runs.pop()
            else:
                runs[-1] = (first, last - 1, offset, nbytes - tensors[last].nbytes)
        return runs


class PlantedActivation(NumpyActivation):
    """unpack() brings every tensor back to device 0, whatever device it was packed from."""

    implementation = "numpy-planted"

    def unpack(self, handle, stream):
        if handle in self.entries:
            tensor, host = self.entries[handle]
            if host is not None and tensor.device != 0:
                self.entries[handle] = (ok.Tensor(tensor.data, tensor.nbytes, 0, tensor.dtype,
                                                  tensor.shape), host)  # the planted bug
        return super().unpack(handle, stream)


def stash():
    return ok.Plugin(name="numpy-planted", stash=PlantedStash)


def region():
    return ok.Plugin(name="numpy-planted", region=PlantedRegion)


def arena():
    return ok.Plugin(name="numpy-planted", arena=PlantedArena)


def activation():
    return ok.Plugin(name="numpy-planted", activation=PlantedActivation)
