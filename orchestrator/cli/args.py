"""What every command shares: how a LAB argument is named, read and resolved, and the help layout."""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aidcnet.modes import Mode

if TYPE_CHECKING:
    from orchestrator.lab.topology import Topology

LAB_HELP = "lab name (labs/NAME.clab.yml) or topology file"
OPTIONAL_LAB_HELP = LAB_HELP + "; default: the one lab running on this machine"


class NoDefaultLab(ValueError):
    """No LAB given and not exactly one lab running: the message lists what runs."""


@dataclass(frozen=True)
class RunningLab:
    name: str
    topology_file: str | None  # the file it was deployed from (label clab-topo-file)
    lab_dir: Path | None  # clab-<lab>/ (the parent of label clab-node-lab-dir)


def running_labs(containers: list[dict]) -> list[RunningLab]:
    """The labs with at least one running container, from Docker's container list (containerlab's
    labels). Lab folders of destroyed labs do not count: only containers do."""
    from orchestrator.lab.runtime.docker import LAB_LABEL

    labs: dict[str, RunningLab] = {}
    for c in containers:
        labels = c.get("Labels") or {}
        if c.get("State") != "running" or not labels.get(LAB_LABEL):
            continue
        node_dir = labels.get("clab-node-lab-dir")
        lab_dir = Path(node_dir).parent if node_dir else None
        name = labels[LAB_LABEL]
        labs.setdefault(name, RunningLab(name, labels.get("clab-topo-file"), lab_dir))
    return [labs[k] for k in sorted(labs)]


def default_lab(containers: list[dict] | None = None) -> RunningLab:
    """The single running lab, for a command given no LAB; NoDefaultLab says what runs otherwise."""
    if containers is None:
        from orchestrator.lab.runtime.docker import DockerRuntime

        containers = DockerRuntime().lab_containers()
    labs = running_labs(containers)
    if len(labs) == 1:
        return labs[0]
    if not labs:
        raise NoDefaultLab("no lab is running: name one (e.g. leaf-spine), or deploy one: aidclab deploy LAB")
    names = ", ".join(lab.name for lab in labs)
    raise NoDefaultLab(f"{len(labs)} labs are running ({names}): name the one you mean")


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Defaults shown after every option that has one; descriptions and examples keep their line breaks."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or action.default is False or action.default is argparse.SUPPRESS:
            return action.help
        return super()._get_help_string(action)


def add_mode_argument(
    p: argparse.ArgumentParser, modes: Iterable[Mode], flag: str = "--mode", **kwargs: Any
) -> None:
    """``--mode`` (or ``flag``), one of ``modes``: where a mode's name is checked, once; the command gets
    the :class:`~aidcnet.modes.Mode` member (a name that is none is refused naming the choices)."""

    def as_mode(text: str) -> Mode | str:
        try:
            return Mode(text)
        except ValueError:
            return text  # argparse's choices refuse it, naming them

    p.add_argument(flag, type=as_mode, choices=[str(m) for m in modes], **kwargs)


def add_lab_argument(p: argparse.ArgumentParser, optional: bool = False, help: str = LAB_HELP) -> None:
    """``optional``: LAB may be left out; load_lab and lab_name then take the one running lab."""
    if optional:
        p.add_argument("lab", nargs="?", help=OPTIONAL_LAB_HELP if help == LAB_HELP else help)
    else:
        p.add_argument("lab", help=help)


def load_lab(lab: str | None) -> Topology:
    """The validated topology of a lab name or topology file (TopologyError names what is wrong); None:
    the one running lab. A split manifest (``<lab>.split.yml``) stands for the whole lab across its parts."""
    from orchestrator.lab.split import is_manifest, load_split
    from orchestrator.lab.topology import load_topology, resolve_lab

    if not lab:
        running = default_lab()
        lab = running.topology_file or running.name
    if is_manifest(lab):
        return load_split(lab).whole
    return load_topology(resolve_lab(lab))


def lab_name(lab: str | None) -> str:
    """A lab name from a name or a topology file, without requiring the file to still be valid (a lab
    whose file was edited since the deploy must still be inspectable and destroyable)."""
    from orchestrator.lab.topology import TopologyError, resolve_lab

    if not lab:
        return default_lab().name
    path = resolve_lab(lab)
    if path.exists():
        try:
            return load_lab(lab).name
        except TopologyError:
            import yaml

            doc = yaml.safe_load(path.read_text()) or {}
            return str(doc.get("name") or path.name.split(".")[0])
    return Path(lab).name.split(".")[0]


def at_least_one(text: str) -> int:
    """An argparse type: a whole number of 1 or more (a count of runs, steps or tries)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a whole number of 1 or more")
    return value
