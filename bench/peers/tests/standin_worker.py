"""A peer's process of bench_peers over the library stand-ins (tests only): what
``bench_peers.WORKER_COMMAND`` runs in ProcessPerPeerTest. It puts the stand-ins first on
``sys.path``, binds the stand-in torch's device to a ``HostMemory`` of this process, and runs
bench_peers with its arguments (``--peer-worker ...``), as the real worker runs on a GPU."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
for path in (HERE, os.path.dirname(HERE), os.path.join(ROOT, "python", "tests", "adapters",
                                                        "standins"), os.path.join(ROOT, "python")):
    if path not in sys.path:
        sys.path.insert(0, path)

import torch  # noqa: E402 (the stand-in)

import bench_peers  # noqa: E402
from standin_memory import HostMemory  # noqa: E402

assert torch.__version__.endswith("offloadkit.standin"), torch.__file__

if __name__ == "__main__":
    torch._standin_bind(HostMemory())
    sys.exit(bench_peers.main(sys.argv[1:]))
