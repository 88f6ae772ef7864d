"""The registry of report sections: one module per feature in this package, each a :class:`Section`
registered by name (memberships, reliability, collectives, time, ...).

Every module here is imported once, on first use of the registry, so a feature adds its part of the
report by adding a module; ``report.document.build_blocks`` asks every registered section for its blocks
of each group, in their ``order``, without knowing any of them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator.registry import Registry

if TYPE_CHECKING:
    from orchestrator.experiment.report.sections.base import Section

# "base" holds shared code, not a section.
_SECTIONS: Registry = Registry(__name__, __path__, "report section", shared={"base"})
register = _SECTIONS.register


def registered() -> list[Section]:
    """One instance of every section, in their ``order`` (ties by name)."""
    return [cls() for cls in sorted(_SECTIONS.load().values(), key=lambda c: (c.order, c.name))]
