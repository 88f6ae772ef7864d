"""``unicast``: the source sends one copy per receiver, host loopback to host loopback, UDP 4791.

The baseline of the message family: what collective libraries do today over a unicast fabric.
"""

from __future__ import annotations

from aidcnet.modes import Mode
from orchestrator.experiment.modes import register
from orchestrator.experiment.modes.messages import MessageMode


@register
class Unicast(MessageMode):
    name = Mode.UNICAST
    summary = "the source sends one copy per receiver, host loopback to host loopback, UDP 4791"
