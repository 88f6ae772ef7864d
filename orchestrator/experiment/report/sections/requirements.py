"""Seed 001's requirements of AI multicast, scored from the runs of one trace (docs/requirements.md): one
row per requirement, one column per technology run, under every condition the trace ran in (loss and link
faults are where reliability and the failure domain are measured). Shown once per lab and trace, in the
group with the cleanest conditions."""

from __future__ import annotations

from orchestrator.experiment.report.blocks import Block, Bullets, Heading, Para, TableBlock
from orchestrator.experiment.report.sections import register
from orchestrator.experiment.report.sections.base import Group, Section


@register
class Requirements(Section):
    name = "requirements"
    order = 65

    def blocks(self, group: Group) -> list[Block]:
        from orchestrator.experiment.requirements import NOT_MEASURED, ROWS, is_clean, requirement_columns

        c = group.comparison
        cleanest = min((c, *group.others), key=lambda o: (not is_clean(o.conditions), o.conditions.rank))
        if not c.multicast or cleanest is not c:
            return []
        runs = [col.run for comp in (c, *group.others) for col in comp.columns]
        columns = requirement_columns(runs)
        if not columns:
            return []
        rows = [[row, *(col.cells[i] for col in columns)] for i, row in enumerate(ROWS)]
        rows.append(["runs", *(", ".join(col.runs) for col in columns)])
        table = TableBlock(header=["requirement", *(col.name for col in columns)], rows=rows)
        note = (
            "Seed 001's gap analysis (draft-zhang-rtgwg-multicast-requirements-gaps-aidc, Table 1) scored "
            "from these runs of the trace, under every condition it ran in: each cell is counted in the "
            "run named below it (the clean run; the run with most loss for reliability, when the mode ran "
            "under loss; a run with a link fault for failure). Definitions: docs/requirements.md."
        )
        missing = [f"{tech}: not measured; {why}." for tech, why in NOT_MEASURED.items()]
        return [Heading(3, "Requirements (seed 001, Table 1)"), table, Para(note), Bullets(missing)]
