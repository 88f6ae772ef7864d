"""The mode classes follow the families of aidcnet/modes.py: what a family says of its modes, the classes
that carry them say too (a mode added to a family without its class's base, or the other way, is caught)."""

from __future__ import annotations

from aidcnet.modes import COLLECTIVE, IP_MULTICAST, MEMBERSHIP, MESSAGE, RELIABLE
from orchestrator.experiment.modes import registered
from orchestrator.experiment.modes.base import Family
from orchestrator.experiment.modes.collective import CollectiveMode
from orchestrator.experiment.modes.igmp import MembershipMode
from orchestrator.experiment.modes.messages import IpMulticastMode, MessageMode
from orchestrator.experiment.modes.reliable import ReliableMode


def _modes_of(base: type) -> set:
    return {mode for mode, cls in registered().items() if issubclass(cls, base)}


def test_the_mode_classes_follow_the_families() -> None:
    assert _modes_of(MessageMode) == MESSAGE
    assert _modes_of(CollectiveMode) == COLLECTIVE
    assert _modes_of(IpMulticastMode) == IP_MULTICAST
    assert _modes_of(MembershipMode) == MEMBERSHIP
    assert _modes_of(ReliableMode) == set(RELIABLE)
    assert {m for m, cls in registered().items() if cls.family is Family.COLLECTIVE} == COLLECTIVE
