"""The region adapters' batteries over their stand-ins through offloadkit's pytest plugin, on the
host executor (the file is named so that ``unittest discover`` leaves it out; pytest runs it when
it is named on the command line)::

    python -m pytest python/tests/adapters/pytest_adapter_batteries.py

vLLM's adapter faces the properties that hold one region at a time (the allocator sleeps every
allocation of the process at once; see ``offloadkit.adapters.vllm``).
"""

import os

from offloadkit.pytest import battery

FACTORIES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "standin_factories.py")

test_torch_memory_saver = battery(f"{FACTORIES}:torch_memory_saver_retain", feature="region",
                                  executors=("host",))

for _prop in ("model_based", "release_is_real", "graph_replay_after_resume", "many_cycles",
              "state_errors", "cross_stream_order", "caller_writes_late"):
    globals()[f"test_vllm_{_prop}"] = battery(f"{FACTORIES}:vllm", feature="region",
                                              executors=("host",), prop=_prop)
