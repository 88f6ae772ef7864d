"""A split lab whose parts run side by side on this machine (``aidclab split --local``): the namespaces
that stand in for their hosts, and the parts deployed and destroyed together, each in its namespace.

``aidclab deploy MANIFEST`` and ``aidclab destroy MANIFEST`` act here; a part on another host (a
``docker-host`` in the manifest) is deployed and destroyed there, by its own file.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from orchestrator.lab.deploy import DeployError, deploy, destroy
from orchestrator.lab.runtime.docker import DockerRuntime
from orchestrator.lab.split import SplitLab
from orchestrator.lab.topology import lab_dir_name
from orchestrator.lab.vxlan import local_underlay, missing_local_underlay, remove_local_underlay
from orchestrator.progress import console


def _hosts(split: SplitLab) -> list[str]:
    return [p["host"] for p in split.parts]


def make_local_underlay(split: SplitLab, runtime: DockerRuntime) -> dict[str, str]:
    """The namespaces standing in for the parts' hosts (host -> namespace), each holding the underlay
    address the part files name as the other parts' remote; any left from before are made anew, unless
    a part still runs on them."""
    if not split.local_underlay:
        raise DeployError(
            f"{split.manifest_path}: its parts are not on one machine (split without --local); deploy each "
            "part on its host: aidclab deploy PART_FILE"
        )
    running = [p["lab"] for p in split.parts if runtime.lab_containers(p["lab"])]
    if running:
        raise DeployError(
            f"{split.manifest_path}: parts {', '.join(running)} run on the underlay namespaces; "
            f"`aidclab destroy {split.manifest_path}` first"
        )
    return local_underlay(
        {p["host"]: p["underlay"] for p in split.parts}, split.local_underlay, split.underlay_mtu
    )


def _local_parts(split: SplitLab) -> list[dict[str, Any]]:
    remote = [p["host"] for p in split.parts if p.get("docker-host")]
    if remote:
        raise DeployError(
            f"{split.manifest_path}: parts {', '.join(remote)} run on other hosts (docker-host); deploy and "
            "destroy each part on its host: aidclab deploy|destroy PART_FILE"
        )
    return split.parts


def deploy_split(split: SplitLab, runtime: DockerRuntime, keep_failed: bool = False) -> list[Path]:
    """Deploy every part, each in its underlay namespace (made when missing); one that fails takes the
    parts deployed before it down with it (``keep_failed``: leaves them, saying how to remove them)."""
    parts = _local_parts(split)
    if not split.local_underlay or missing_local_underlay(split.local_underlay, _hosts(split)):
        make_local_underlay(split, runtime)  # a reboot removes them; or: how parts on several hosts go
    dirs = []
    for i, part in enumerate(parts):
        topo = split.part_topology(part["host"])
        try:
            dirs.append(deploy(topo, runtime, underlay_netns=part["underlay-netns"], keep_failed=keep_failed))
        except (DeployError, KeyboardInterrupt) as exc:
            if not i:
                raise
            earlier = ", ".join(p["lab"] for p in parts[:i])
            if keep_failed:
                outcome = f"parts {earlier} left up; `aidclab destroy {split.manifest_path}` removes them"
            else:
                for p in parts[:i]:
                    destroy(p["lab"], runtime, quiet=True, underlay_netns=p["underlay-netns"])
                outcome = f"parts {earlier}, deployed before it, rolled back too"
            if isinstance(exc, KeyboardInterrupt):
                console.print(outcome)
                raise
            raise DeployError(f"part {part['lab']}: {exc}; {outcome}") from exc
    return dirs


def destroy_split(
    split: SplitLab, runtime: DockerRuntime, cleanup: bool = False, root: Path | None = None
) -> int:
    """Destroy every part, then the namespaces that stood in for their hosts; ``cleanup``: the parts' lab
    directories and the whole lab's (``clab-<lab>/``, which configure wrote) too. Returns containers
    removed."""
    removed = 0
    for part in _local_parts(split):
        netns = part.get("underlay-netns")
        removed += destroy(part["lab"], runtime, cleanup=cleanup, lab_dir_root=root, underlay_netns=netns)
    if split.local_underlay:
        gone = remove_local_underlay(split.local_underlay, _hosts(split))
        console.print(f"destroy {split.whole.name}: removed {gone} namespaces {split.local_underlay}-*")
    whole = (root or Path.cwd()) / lab_dir_name(split.whole.name)
    if cleanup and whole.exists():
        shutil.rmtree(whole)
        console.print(f"destroy {split.whole.name}: removed the whole lab's directory {whole.name}/")
    return removed
