"""Region peers with planted faults for bench_peers's ProcessPerPeerTest (tests only): each is
torch_memory_saver's adapter (``make_retain_cpu_backup``) over the stand-in library, with one
change. Loaded by file path in the peer's process (standin_worker.py binds the stand-ins)."""

import atexit
import ctypes
import os
import sys
import time

from offloadkit.adapters import torch_memory_saver as adapter


def _with_region(change):
    plugin = adapter.make_retain_cpu_backup()
    plugin.region = change(plugin.region)
    return plugin


def corrupting():
    """Every resume brings the region back with its first 4 KiB zeroed: #wrong above 0."""

    def change(region):
        class Corrupting(region):
            def resume(self, stream):
                super().resume(stream)
                ctypes.memset(self.info().data, 0, 4096)

        return Corrupting

    return _with_region(change)


def hanging():
    """The first pause never returns (a peer stuck in its library). Its process id goes to the
    file that HANGING_PID_FILE names, once it hangs."""

    def change(region):
        class Hanging(region):
            def pause(self, mode, stream):
                sys.stdout.write("planted: hanging in pause\n")
                sys.stdout.flush()
                with open(os.environ["HANGING_PID_FILE"] + ".tmp", "w") as f:
                    f.write(str(os.getpid()))
                os.rename(os.environ["HANGING_PID_FILE"] + ".tmp", os.environ["HANGING_PID_FILE"])
                while True:
                    time.sleep(1)

        return Hanging

    return _with_region(change)


def crashing():
    """The first pause aborts the process (SIGABRT), before any row is written."""

    def change(region):
        class Crashing(region):
            def pause(self, mode, stream):
                sys.stdout.write("planted: aborting in pause\n")
                sys.stdout.flush()
                os.abort()

        return Crashing

    return _with_region(change)


def exits_badly():
    """Measures cleanly, then its process exits with status 3 at interpreter exit."""
    atexit.register(lambda: os._exit(3))
    return adapter.make_retain_cpu_backup()


def poisoning():
    """Sets the library's process-global hook mode on loading, as Megatron-LM's import set
    torch_memory_saver.hook_mode = "torch"; measures cleanly itself."""
    import torch_memory_saver

    torch_memory_saver.hook_mode = "torch"
    return adapter.make_retain_cpu_backup()


def poisoned():
    """A region that cannot be made once the hook mode was set by another library in this
    process (the real library's make_retain_cpu_backup then fails on a missing attribute)."""

    def change(region):
        class Poisoned(region):
            def __init__(self, executor, config):
                import torch_memory_saver

                if getattr(torch_memory_saver, "hook_mode", None) == "torch":
                    raise RuntimeError("hook_mode was set to 'torch' by another library in this "
                                       "process")
                super().__init__(executor, config)

        return Poisoned

    return _with_region(change)


def corrupting_on_side_stream():
    """An activation peer (TRL's single-stream adapter over the stand-in) whose unpacked tensors
    come back zeroed when the caller's stream is not the default stream (offloadkit's
    LEGACY_DEFAULT_STREAM; 0 in torch): the shape of
    torchtune's and TRL's defect, a copy ordered with the default stream only."""
    from offloadkit import LEGACY_DEFAULT_STREAM
    from offloadkit.adapters import trl

    plugin = trl.make_single_stream()

    class CorruptingOnSideStream(plugin.activation):
        def unpack(self, handle, stream):
            out = super().unpack(handle, stream)
            if int(stream) not in (0, LEGACY_DEFAULT_STREAM):
                out.data.fill_(0)
            return out

    plugin.activation = CorruptingOnSideStream
    return plugin
