"""offloadkit's batteries in a pytest suite: each assignment below becomes one pytest item per
property and executor (``[host]``, ``[cuda]``), run by offloadkit's pytest plugin (loaded by an
installed offloadkit's entry point, or with ``-p offloadkit.pytest``):

    pytest -p offloadkit.pytest examples/python/test_numpy_battery.py --offloadkit-cases 20

The NumPy arena passes; the planted one (numpy_planted.py: reload() leaves the last tensor out)
fails, each failing item with its seed, shrunk counterexample and reproduce command. The cuda items
are skipped, with the reason, where no GPU is usable.
"""

import os

from offloadkit.pytest import battery

HERE = os.path.dirname(os.path.abspath(__file__))

test_numpy_arena = battery(os.path.join(HERE, "numpy_offload.py") + ":make_arena")
test_planted_arena = battery(os.path.join(HERE, "numpy_planted.py") + ":arena")
test_numpy_stash_round_trip = battery(os.path.join(HERE, "numpy_offload.py") + ":make_stash",
                                      feature="stash", prop="model_based")
