"""What every command shares: how a LAB argument is named, read and resolved, and the help layout."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from orchestrator.lab.topology import Topology

LAB_HELP = "lab name (labs/NAME.clab.yml) or topology file"


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Defaults shown after every option that has one; descriptions and examples keep their line breaks."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or action.default is False or action.default is argparse.SUPPRESS:
            return action.help
        return super()._get_help_string(action)


def add_lab_argument(p: argparse.ArgumentParser, optional: bool = False, help: str = LAB_HELP) -> None:
    if optional:
        p.add_argument("lab", nargs="?", help=help)
    else:
        p.add_argument("lab", help=help)


def load_lab(lab: str) -> Topology:
    """The validated topology of a lab name or topology file (TopologyError names what is wrong). A split
    manifest (``<lab>.split.yml``) stands for the whole lab across its parts."""
    from orchestrator.lab.split import is_manifest, load_split
    from orchestrator.lab.topology import load_topology, resolve_lab

    if is_manifest(lab):
        return load_split(lab).whole
    return load_topology(resolve_lab(lab))


def lab_name(lab: str) -> str:
    """A lab name from a name or a topology file, without requiring the file to still be valid (a lab
    whose file was edited since the deploy must still be inspectable and destroyable)."""
    from orchestrator.lab.topology import TopologyError, resolve_lab

    path = resolve_lab(lab)
    if path.exists():
        try:
            return load_lab(lab).name
        except TopologyError:
            import yaml

            doc = yaml.safe_load(path.read_text()) or {}
            return str(doc.get("name") or path.name.split(".")[0])
    return Path(lab).name.split(".")[0]
