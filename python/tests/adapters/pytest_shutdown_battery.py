"""A battery whose every property holds while each property's process crashes at interpreter exit
(standin_factories.crashes_at_exit), through offloadkit's pytest plugin: the property items pass,
and the battery's shutdown[host] item fails once, naming the crash (ctest's
python_module.adapter_pytest_shutdown)::

    python -m pytest python/tests/adapters/pytest_shutdown_battery.py
"""

import os

from offloadkit.pytest import battery

FACTORIES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "standin_factories.py")

test_crashes_at_exit = battery(f"{FACTORIES}:crashes_at_exit", feature="region",
                               executors=("host",), cases=2)
