"""offloadkit for Python: check an offload implementation written in Python with offloadkit's
property batteries, and record a production run's stash schedule for ``offloadkit replay``.

- ``protocol``: what ``offloadkit check --python MODULE:FACTORY`` expects of a Python
  implementation (``Plugin``, ``Stash``, ``Region``, ``Arena``, ``Activation``, capabilities,
  stream order, errors, the executor it is lent).
- ``errors``: the typed errors the batteries recognise (``OutOfRange``, ``StateError``,
  ``OutOfMemory`` ...).
- ``saved_tensor_hooks``: a pair of PyTorch saved-tensor hooks as an activation implementation.
- ``ScheduleRecorder``: writes the schedule format that ``offloadkit replay`` reads.
- ``torch_stream``: an offloadkit stream as ``torch.cuda.ExternalStream``.

Nothing here imports PyTorch or NumPy until it is used.
"""

from .errors import (CudaError, Error, InjectedFault, LogicError, OutOfMemory, OutOfRange,
                     PlatformError, StateError, with_context)
from .hooks import saved_tensor_hooks
from .protocol import (BOTH_EXECUTORS, CODEC_KEY_LIMITS, CUDA_EXECUTOR, EXECUTOR_ALLOCATIONS,
                       HOST_EXECUTOR, Activation, Arena, Feature, Plugin, Region, Stash,
                       capture_graph, host_copy)
from .schedule import ScheduleError, ScheduleRecorder, TorchRing
from .torch_support import as_torch, from_torch, torch_stream
from .types import (LEGACY_DEFAULT_STREAM, ActivationStats, ArenaInfo, Buffer, Event, Graph,
                    OffloadOptions, Physical,
                    RegionConfig, RegionInfo, StashConfig, StashEntry, StashKey, StashSnapshot,
                    StashStatus, Stream, Tensor, check_key, dtype_name, encode_key)

__version__ = "0.1.0"

# `pytest -p offloadkit` loads the pytest plugin (offloadkit.pytest) through this, also with
# PYTEST_DISABLE_PLUGIN_AUTOLOAD set; pytest itself is imported only by that module.
pytest_plugins = ["offloadkit.pytest"]

__all__ = [
    "Activation", "ActivationStats", "Arena", "ArenaInfo", "BOTH_EXECUTORS", "Buffer",
    "CODEC_KEY_LIMITS", "CUDA_EXECUTOR", "CudaError", "EXECUTOR_ALLOCATIONS", "Error", "Event", "Feature", "Graph",
    "HOST_EXECUTOR", "InjectedFault", "LEGACY_DEFAULT_STREAM", "LogicError", "OffloadOptions", "OutOfMemory", "OutOfRange",
    "Physical", "PlatformError", "Plugin", "Region", "RegionConfig", "RegionInfo", "ScheduleError",
    "ScheduleRecorder", "TorchRing", "Stash", "StashConfig", "StashEntry", "StashKey", "StashSnapshot",
    "StashStatus", "StateError", "Stream", "Tensor", "as_torch", "capture_graph", "check_key",
    "dtype_name", "encode_key", "from_torch", "host_copy", "saved_tensor_hooks", "torch_stream",
    "with_context",
]
