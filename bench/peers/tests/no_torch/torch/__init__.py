"""Hides any installed PyTorch (bench_peers.skipped puts this folder first on PYTHONPATH): the
test proves the path of a machine without PyTorch, the same on a machine that has it."""

raise ImportError("PyTorch hidden by bench/peers/tests/no_torch (the no-PyTorch path under test)")
