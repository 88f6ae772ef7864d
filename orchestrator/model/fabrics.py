"""Fabric generators at any size, named as the shipped labs name their nodes, in memory or as
containerlab topology files.

* :class:`Clos`: hosts ``h1..``, leaves ``leaf1..``, spines ``spine1..`` and, with ``supers_per_plane``,
  super-spines ``super1..`` (a 3-tier Clos: spine j of every pod links to the super-spines of plane j).
  Interfaces follow labs/leaf-spine.clab.yml: a leaf's ``eth1..ethS`` go up to its pod's spines, then one
  port per host; a spine's ``eth1..`` go down to its pod's leaves, then up to its plane's super-spines.
  Hosts are numbered leaf by leaf, so dense BFR-ids in host order are also topology-aware.
* :class:`RailOptimized`: servers of ``rails`` GPUs; GPU r of every server links to rail leaf r of its
  group, rail leaves to spines (hosts ``h1..``, leaves ``leaf1..``, spines ``spine1..``).
* :class:`SuperPod`: seed 004's multi-plane scale-up network (labs/superpod.clab.yml): ``G1..`` GPUs with
  one port per plane, plane leaves ``L1..``; GPU Gn's ethP links to leaf LP's ethn.

Pure: :meth:`topology` builds an :class:`orchestrator.lab.topology.Topology` without touching files;
:meth:`clab` gives the containerlab document to write (``aidclab model generate``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aidcnet.roles import Role
from orchestrator.lab.roles import ROLES
from orchestrator.lab.topology import LINUX_KIND, Endpoint, Link, Node, Topology

GPU_IMAGE = ROLES[Role.GPU_HOST].image
BFR_IMAGE = ROLES[Role.BFR].image


class _Fabric:
    name: str

    def wiring(self) -> tuple[dict[str, str], list[tuple[str, str]]]:  # pragma: no cover - abstract
        raise NotImplementedError

    def topology(self, path: str | Path | None = None) -> Topology:
        nodes, links = self.wiring()
        return Topology(
            name=self.name,
            path=Path(path or f"{self.name}.clab.yml"),
            nodes={n: Node(name=n, kind=LINUX_KIND, image=img) for n, img in nodes.items()},
            links=[
                Link(a=Endpoint(*a.split(":")), b=Endpoint(*b.split(":")), index=i)
                for i, (a, b) in enumerate(links)
            ],
        )

    def clab(self) -> dict[str, Any]:
        nodes, links = self.wiring()
        doc: dict[str, Any] = {
            "name": self.name,
            "topology": {
                "defaults": {"kind": LINUX_KIND},
                "nodes": {n: {"image": img} for n, img in nodes.items()},
                "links": [{"endpoints": [a, b]} for a, b in links],
            },
        }
        # No mgmt: the lab gets a management network of its own, sized to its nodes at deploy.
        return doc


@dataclass(frozen=True)
class Clos(_Fabric):
    pods: int = 1
    leaves_per_pod: int = 4
    hosts_per_leaf: int = 2
    spines_per_pod: int = 2
    supers_per_plane: int = 0
    name: str = "clos"

    def __post_init__(self) -> None:
        for field in ("pods", "leaves_per_pod", "hosts_per_leaf", "spines_per_pod"):
            if getattr(self, field) < 1:
                raise ValueError(f"Clos {field} must be >= 1, got {getattr(self, field)}")
        if self.pods > 1 and self.supers_per_plane < 1:
            raise ValueError("a Clos of several pods needs super-spines (supers_per_plane >= 1)")

    @property
    def leaves(self) -> int:
        return self.pods * self.leaves_per_pod

    @property
    def hosts(self) -> int:
        return self.leaves * self.hosts_per_leaf

    @property
    def spines(self) -> int:
        return self.pods * self.spines_per_pod

    @property
    def supers(self) -> int:
        return self.spines_per_pod * self.supers_per_plane if self.supers_per_plane else 0

    @classmethod
    def for_gpus(cls, gpus: int, radix: int = 64, name: str | None = None) -> Clos:
        """A 3-tier Clos of ``radix``-port switches (half down, half up) for about ``gpus`` hosts; two tiers
        when one pod is enough."""
        half = radix // 2
        leaves = -(-gpus // half)
        if leaves <= half:
            return cls(1, leaves, half, half, 0, name or f"clos-{gpus}")
        pods = -(-leaves // half)
        return cls(pods, half, half, half, max(1, -(-pods * half // radix)), name or f"clos-{gpus}")

    def wiring(self) -> tuple[dict[str, str], list[tuple[str, str]]]:
        nodes: dict[str, str] = {}
        for s in range(1, self.supers + 1):
            nodes[f"super{s}"] = BFR_IMAGE
        for s in range(1, self.spines + 1):
            nodes[f"spine{s}"] = BFR_IMAGE
        for leaf in range(1, self.leaves + 1):
            nodes[f"leaf{leaf}"] = BFR_IMAGE
        for h in range(1, self.hosts + 1):
            nodes[f"h{h}"] = GPU_IMAGE
        links: list[tuple[str, str]] = []
        S, L, H, K = self.spines_per_pod, self.leaves_per_pod, self.hosts_per_leaf, self.supers_per_plane
        for p in range(self.pods):
            for li in range(L):
                leaf = p * L + li + 1
                for j in range(S):
                    links.append((f"leaf{leaf}:eth{j + 1}", f"spine{p * S + j + 1}:eth{li + 1}"))
        for p in range(self.pods):
            for j in range(S):
                for k in range(K):
                    links.append((f"spine{p * S + j + 1}:eth{L + k + 1}", f"super{j * K + k + 1}:eth{p + 1}"))
        for leaf in range(1, self.leaves + 1):
            for i in range(H):
                links.append((f"h{(leaf - 1) * H + i + 1}:eth1", f"leaf{leaf}:eth{S + i + 1}"))
        return nodes, links


@dataclass(frozen=True)
class RailOptimized(_Fabric):
    groups: int = 1
    servers_per_group: int = 2
    rails: int = 4
    spines: int = 2
    name: str = "rail"

    @property
    def hosts(self) -> int:
        return self.groups * self.servers_per_group * self.rails

    def wiring(self) -> tuple[dict[str, str], list[tuple[str, str]]]:
        nodes: dict[str, str] = {}
        for s in range(1, self.spines + 1):
            nodes[f"spine{s}"] = BFR_IMAGE
        for leaf in range(1, self.groups * self.rails + 1):
            nodes[f"leaf{leaf}"] = BFR_IMAGE
        for h in range(1, self.hosts + 1):
            nodes[f"h{h}"] = GPU_IMAGE
        links: list[tuple[str, str]] = []
        for leaf in range(1, self.groups * self.rails + 1):
            for s in range(1, self.spines + 1):
                links.append((f"leaf{leaf}:eth{s}", f"spine{s}:eth{leaf}"))
        for g in range(self.groups):
            for srv in range(self.servers_per_group):
                for r in range(self.rails):
                    host = (g * self.servers_per_group + srv) * self.rails + r + 1
                    leaf = g * self.rails + r + 1
                    links.append((f"h{host}:eth1", f"leaf{leaf}:eth{self.spines + srv + 1}"))
        return nodes, links


@dataclass(frozen=True)
class SuperPod(_Fabric):
    gpus: int = 64
    planes: int = 4
    name: str = "superpod"

    def wiring(self) -> tuple[dict[str, str], list[tuple[str, str]]]:
        nodes = {f"L{p}": BFR_IMAGE for p in range(1, self.planes + 1)}
        nodes.update({f"G{g}": GPU_IMAGE for g in range(1, self.gpus + 1)})
        links = [
            (f"G{g}:eth{p}", f"L{p}:eth{g}")
            for g in range(1, self.gpus + 1)
            for p in range(1, self.planes + 1)
        ]
        return nodes, links


FABRICS = {"clos": Clos, "rail": RailOptimized, "superpod": SuperPod}


def parse_fabric(spec: str) -> _Fabric:
    """``clos:pods=2,leaves_per_pod=4,...``, ``clos:gpus=65536``, ``rail:groups=2``, ``superpod:gpus=64``."""
    kind, _, rest = spec.partition(":")
    if kind not in FABRICS:
        raise ValueError(
            f"fabric {spec!r}: the kind must be one of {', '.join(FABRICS)} (e.g. clos:gpus=1024)"
        )
    kwargs: dict[str, Any] = {}
    for item in filter(None, rest.split(",")):
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"fabric {spec!r}: {item!r} is not key=value")
        kwargs[key.replace("-", "_")] = value if key == "name" else int(value)
    if kind == "clos" and "gpus" in kwargs:
        gpus = kwargs.pop("gpus")
        return Clos.for_gpus(gpus, kwargs.pop("radix", 64), kwargs.pop("name", None))
    try:
        return FABRICS[kind](**kwargs)
    except TypeError as exc:
        raise ValueError(f"fabric {spec!r}: {exc}") from None
