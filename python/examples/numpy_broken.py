"""An arena whose reload raises a plain Python exception from a helper: the failure offloadkit
reports must carry the exception, its message and the Python traceback down to the helper.

    offloadkit check --executor host --python python/examples/numpy_broken.py:make
"""

import offloadkit as ok
from numpy_offload import NumpyArena


def chunk_bytes(total, chunks):
    return total // chunks  # chunks is 0 for the last reload: the bug


class BrokenArena(NumpyArena):
    implementation = "numpy-broken"

    def reload(self, tensors, stream):
        chunk_bytes(sum(t.nbytes for t in tensors), len(tensors) - len(self.sizes))
        return super().reload(tensors, stream)


def make():
    return ok.Plugin(name="numpy-broken", arena=BrokenArena)
