"""``host-bier``: the source host is the BFIR and sends one copy with its receivers' BFR-ids
(docs/bier.md); the BFRs replicate it."""

from __future__ import annotations

from aidcnet.modes import Mode
from orchestrator.experiment.modes import register
from orchestrator.experiment.modes.messages import MessageMode
from orchestrator.experiment.session import ExperimentError, HostInfo


@register
class HostBier(MessageMode):
    name = Mode.HOST_BIER
    summary = "the source host is the BFIR: one copy with the receivers' BFR-ids (docs/bier.md)"

    def check_hosts(self, hosts: dict[str, HostInfo]) -> None:
        unnumbered = [h.name for h in hosts.values() if h.bfr_id is None]
        if unnumbered:
            names = ", ".join(unnumbered)
            raise ExperimentError(f"{self.name} needs BFR-ids; the plan gives none to {names}")
