"""An arena whose reload raises a plain Python exception from a helper: the failure offloadkit
reports must carry the exception, its message and the Python traceback down to the helper. And a
region whose info() raises after a failed pause: that error is kept and reported by the next call.
And an arena whose close() raises: the case that destroyed it fails.

    offloadkit check --executor host --python examples/python/numpy_broken.py:make
    offloadkit check --executor host --python examples/python/numpy_broken.py:make_stale_info
    offloadkit check --executor host --python examples/python/numpy_broken.py:make_double_close
"""

import offloadkit as ok
from numpy_offload import NumpyArena, NumpyRegion


def chunk_bytes(total, chunks):
    return total // chunks  # chunks is 0 for the last reload: the bug


class BrokenArena(NumpyArena):
    implementation = "numpy-broken"

    def reload(self, tensors, stream):
        chunk_bytes(sum(t.nbytes for t in tensors), len(tensors) - len(self.sizes))
        return super().reload(tensors, stream)


def make():
    return ok.Plugin(name="numpy-broken", arena=BrokenArena)


class StaleInfoRegion(NumpyRegion):
    """A region whose info() raises once a pause has failed: the bridge reads info() after the
    failed call, whose own error is the one it throws, so it keeps this one and the next call
    reports it; the check must fail with it rather than go on with a stale state."""

    implementation = "numpy-stale-info"
    pause_failed = False

    def pause(self, mode, stream):
        try:
            super().pause(mode, stream)
        except BaseException:
            self.pause_failed = True
            raise

    def info(self):
        if self.pause_failed:
            raise RuntimeError("info: the state table is out of date")
        return super().info()


def make_stale_info():
    return ok.Plugin(name="numpy-broken", region=StaleInfoRegion)


class DoubleCloseArena(NumpyArena):
    """An arena with a small pinned staging buffer of its own, which close() gives back twice: the
    executor refuses the second deallocate (StateError), so close() raises when offloadkit destroys
    the arena. The case that destroyed it must fail, naming close."""

    implementation = "numpy-double-close"

    def __init__(self, executor):
        super().__init__(executor)
        self.staging = self.ex.allocate(64, "pinned")

    def release(self):
        NumpyArena.close(self)  # the arena's buffer only: staging lives until close()
        self.released = True

    def close(self):
        super().close()
        if self.staging is not None:
            self.ex.deallocate(self.staging)
            self.ex.deallocate(self.staging)  # the bug: released a second time
            self.staging = None


def make_double_close():
    return ok.Plugin(name="numpy-broken", arena=DoubleCloseArena)
