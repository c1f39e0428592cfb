"""Factories that run offloadkit's adapters over the library stand-ins on the host executor
(tests only).

Importing this module puts ``standins/`` first on ``sys.path``, so that the adapters import the
stand-ins of ``torch``, ``torch_memory_saver``, ``vllm`` and Megatron's ``paged_stash``. Each
factory is the adapter's own ``make()`` with one change: its feature class also declares
``host_executor`` and binds the stand-in torch's device to the executor it is given. The profile
the batteries check is the adapter's, unchanged.

    python -m offloadkit check python/tests/adapters/standin_factories.py:torch_memory_saver \\
        --executor host
"""

import os
import sys

STANDINS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "standins")
if STANDINS not in sys.path:
    sys.path.insert(0, STANDINS)

import torch  # noqa: E402 (the stand-in, from STANDINS)

from offloadkit.errors import LogicError  # noqa: E402
from offloadkit.protocol import HOST_EXECUTOR, Plugin  # noqa: E402

if not getattr(torch, "__version__", "").endswith("offloadkit.standin"):
    raise LogicError(f"torch was imported from {getattr(torch, '__file__', '?')} before the "
                     f"stand-ins of {STANDINS}: run the stand-in factories in a fresh process")


def _on_host(feature):
    class OnHost(feature):
        capabilities = frozenset(feature.capabilities) | {HOST_EXECUTOR}

        def __init__(self, executor, config):
            torch._standin_bind(executor)
            super().__init__(executor, config)

    OnHost.__name__ = OnHost.__qualname__ = feature.__name__
    return OnHost


def _stash_on_host(feature):
    """As _on_host, binding the object's executor again before each call: a stash allocates at
    every call, and with two objects alive each must allocate through the executor lent to it."""

    def bound(name):
        def call(self, *args):
            torch._standin_bind(self.executor)
            return getattr(feature, name)(self, *args)
        return call

    def __init__(self, executor, config, stream):
        torch._standin_bind(executor)
        feature.__init__(self, executor, config, stream)

    OnHost = type(feature.__name__, (feature,), {
        "capabilities": frozenset(feature.capabilities) | {HOST_EXECUTOR}, "__init__": __init__,
        **{name: bound(name) for name in ("stash", "restore", "reset", "clear_status",
                                          "snapshot", "close")}})
    OnHost.__qualname__ = feature.__name__
    return OnHost


def _region_on_host(plugin: Plugin) -> Plugin:
    plugin.region = _on_host(plugin.region)
    return plugin


def torch_memory_saver() -> Plugin:
    from offloadkit.adapters import torch_memory_saver as adapter

    return _region_on_host(adapter.make())


def vllm() -> Plugin:
    from offloadkit.adapters import vllm as adapter

    return _region_on_host(adapter.make())


def torch_memory_saver_retain() -> Plugin:
    from offloadkit.adapters import torch_memory_saver as adapter

    return _region_on_host(adapter.make_retain_cpu_backup())


def crashes_at_exit() -> Plugin:
    """torch_memory_saver_retain (every property holds) whose process, once it has created a
    region, crashes at interpreter exit (SIGSEGV from an atexit handler), as torch_memory_saver's
    hook mode does on a GPU: every property's result is in before the crash, so each property
    holds and the crash is one shutdown finding. The process that only lists the properties
    creates no region and exits cleanly."""
    import atexit
    import signal

    plugin = torch_memory_saver_retain()
    region = plugin.region

    class CrashesAtExit(region):
        armed = False

        def __init__(self, executor, config):
            super().__init__(executor, config)
            if not CrashesAtExit.armed:
                CrashesAtExit.armed = True
                atexit.register(lambda: os.kill(os.getpid(), signal.SIGSEGV))

    CrashesAtExit.__name__ = CrashesAtExit.__qualname__ = region.__name__
    plugin.region = CrashesAtExit
    return plugin


def megatron_paged_stash() -> Plugin:
    from offloadkit.adapters import megatron_paged_stash as adapter

    plugin = adapter.make()
    plugin.stash = _stash_on_host(plugin.stash)
    return plugin
