"""Stand-in of ``torchtune.training`` (tests only): ``OffloadActivations``, whose phase check is an
``AssertionError`` as in torchtune (see ``_offload_hooks``)."""

from _offload_hooks import OffloadHooksStandIn


class OffloadActivations(OffloadHooksStandIn):
    instances: list = []
    phase_error = AssertionError
