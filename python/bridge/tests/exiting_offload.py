"""A NumPy arena whose reload() ends the process with os._exit(3) when it reloads more than two
tensors, beside the NumPy activation offload: each arena property ends in a child that exits
without a result, one FAILED row each, and the run goes on to the activation properties, which
pass (python_module.check_crash).
"""

import os

import offloadkit as ok
from numpy_offload import NumpyActivation, NumpyArena


class ExitingArena(NumpyArena):
    implementation = "numpy-exiting"

    def reload(self, tensors, stream):
        if len(tensors) > 2:
            os._exit(3)
        return super().reload(tensors, stream)


def make():
    return ok.Plugin(name="numpy-exiting", arena=ExitingArena, activation=NumpyActivation)
