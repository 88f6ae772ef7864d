"""What the benches that deploy labs share: one lab lifecycle, their parser, and the workload generator.

A bench that needs a lab takes a copy of a shipped one (``labs/LAB.clab.yml``) under a name of its own,
deployed from a temporary work dir, configured, and destroyed whatever happens (a failure, Ctrl-C,
SIGTERM): :func:`aidclab.pytest.deployed_lab`, the lifecycle users' own lab tests get. The bench runs in
that work dir (the orchestrator finds ``clab-<lab>/`` in the working directory, as the CLI does). A lab
already running under the bench's name is refused, never touched: ``--name-prefix`` gives the copies
other names, ``aidclab destroy NAME`` clears one a killed run left.
"""

from __future__ import annotations

import argparse
import contextlib
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from aidclab.pytest import Lab, deployed_lab, working_dir
from orchestrator.configure.plan import vars_path_for
from orchestrator.paths import LABS, ROOT

NAME_PREFIX = "bench-"


def bench_parser(doc: str | None) -> argparse.ArgumentParser:
    """The parser of a bench that deploys labs: its module docstring as the description, and
    ``--name-prefix`` for the labs' names."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--name-prefix",
        default=NAME_PREFIX,
        metavar="PREFIX",
        help=f"prefix of the names of the labs this bench deploys (default {NAME_PREFIX}); they are "
        "copies of the shipped labs, so a lab of yours running under the shipped name is not touched",
    )
    return parser


def shipped(lab: str) -> Path:
    """A shipped lab's topology file: ``labs/LAB.clab.yml`` of this tree, wherever the bench runs from."""
    return LABS / f"{lab}.clab.yml"


def shipped_vars(lab: str) -> dict[str, Any]:
    """A shipped lab's vars (``labs/LAB.vars.yml``), ``{}`` when it has none."""
    path = LABS / f"{lab}.vars.yml"
    return (yaml.safe_load(path.read_text()) if path.exists() else None) or {}


@contextlib.contextmanager
def bench_lab(
    lab: str | Path,
    name: str,
    *,
    vars: Mapping[str, Any] | None = None,
    edit: Callable[[dict], None] | None = None,
    configure: bool = True,
) -> Iterator[Lab]:
    """``lab`` (a shipped lab's name, or a ``*.clab.yml`` file) deployed as ``name`` from a temporary work
    dir, configured unless told not to, with the working directory in its work dir while the bench runs;
    destroyed, and the work dir removed, on the way out. ``vars``: the copy's vars (None: the shipped
    lab's own); ``edit`` changes the copy's topology (see :func:`aidclab.pytest.topology_file`)."""
    source = shipped(lab) if isinstance(lab, str) else lab
    with (
        tempfile.TemporaryDirectory(prefix=f"aidclab-{name}-") as tmp,
        deployed_lab(
            source, Path(tmp), name=name, vars=vars, edit=edit, configure=configure, root=ROOT
        ) as handle,
        working_dir(handle.workdir),
    ):
        yield handle


def set_vars(lab: Lab, lab_vars: Mapping[str, Any]) -> None:
    """Replace the deployed copy's vars; the next ``lab.configure()`` applies them."""
    vars_path_for(lab.topo).write_text(yaml.safe_dump(dict(lab_vars)))


def set_loss(lab: Lab, p: float) -> None:
    """Loss ``p`` (0..1) on every link end of the lab, each direction on its own (``aidclab link set END
    loss P``, one way): 0 clears it."""
    from orchestrator.lab.shaping import load_fabric

    for end in sorted(load_fabric(lab.lab_dir).ends):
        lab.link_set(end, "loss", str(p), one_way=True)


def workload(path: Path, kind: str, *args: str) -> Path:
    """``aidclab workload KIND ARGS -o PATH``: a generated trace, written to ``path``."""
    cmd = [sys.executable, "-m", "orchestrator.cli.workload", kind, *args, "-o", str(path)]
    subprocess.run(cmd, check=True, cwd=ROOT)
    return path


def moe_trace(
    path: Path, hosts: list[str], steps: int, tokens_per_host: int, seed: int, experts: int | None = None
) -> Path:
    """A MoE dispatch trace over ``hosts``; ``experts``: the workload's default when None (one per host is
    too few for top-8 at 256 hosts)."""
    return workload(
        path, "moe", "--hosts", ",".join(hosts), "--steps", str(steps), "--tokens-per-host",
        str(tokens_per_host), "--seed", str(seed), *(["--experts", str(experts)] if experts else []),
    )  # fmt: skip
