"""Loss injection inside an agent: a unit-test seam only.

A lab's loss lives on the link, in the link-fault tc program (``aidcnet/ebpf/link_fault.c``, set by
``aidclab link set NODE:IF loss ...``), so every kind of traffic meets it. This class stays so that unit
tests can drop a share of what one service sends without a kernel: one :class:`EgressLoss` holds a drop
probability per interface (``aidcnet ctl drop IFACE PROB`` sets it in a running agent) and counts drops
per interface.
"""

from __future__ import annotations

import random
from collections import Counter


class EgressLoss:
    def __init__(self, seed: int | None = None) -> None:
        self.probability: dict[str, float] = {}
        self.dropped: Counter[str] = Counter()
        self._rng = random.Random(seed)

    def set(self, interface: str, probability: float) -> None:
        """``probability`` 0 removes the rule; values outside [0, 1] are refused."""
        if not 0.0 <= probability <= 1.0:
            raise ValueError(f"drop probability {probability} must be between 0 and 1")
        if probability == 0.0:
            self.probability.pop(interface, None)
        else:
            self.probability[interface] = probability

    def keep(self, interface: str | None) -> bool:
        """False when the datagram leaving on ``interface`` is to be dropped (and counts it)."""
        p = self.probability.get(interface) if interface else None
        if p is None or self._rng.random() >= p:
            return True
        self.dropped[interface] += 1
        return False

    def counters(self) -> dict[str, int]:
        return {f"loss.injected.{ifname}": n for ifname, n in sorted(self.dropped.items())}
