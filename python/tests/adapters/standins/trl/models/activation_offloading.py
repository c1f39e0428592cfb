"""Stand-in of ``trl.models.activation_offloading`` (tests only): ``OffloadActivations``, whose
phase check is a ``ValueError`` as in TRL (see ``_offload_hooks``)."""

from _offload_hooks import OffloadHooksStandIn


class OffloadActivations(OffloadHooksStandIn):
    instances: list = []
    phase_error = ValueError
