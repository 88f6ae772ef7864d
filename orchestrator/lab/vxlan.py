"""VXLAN link ends through netlink (pyroute2), the way containerlab builds them.

- ``type: vxlan``: the VXLAN device is created in the underlay namespace (the host's, or the part's own
  namespace when parts share one machine) and then moved into the node under its final name. Its UDP
  socket stays in the namespace it was created in, so the node sees a plain Ethernet interface while the
  encapsulated packets leave through the underlay.
- ``type: vxlan-stitch``: the node gets a veth; its other end and the VXLAN device stay in the underlay
  namespace and a tc ingress filter on each redirects every frame to the other, so the link can be
  watched and impaired on the host.

Every device left in the underlay namespace carries the alias ``aidclab:<lab>``; destroy deletes by that
alias, so it also cleans up after a deploy that died halfway.

One kernel refuses two VXLAN devices with the same VNI on the same UDP port in one namespace, whatever
their remotes. Two parts of one lab on one machine hold both ends of every cut link, with the same VNI
and port, so each part gets its own underlay namespace (``local_underlay``): two "hosts" joined by a
bridge, with the addresses ``aidclab split`` wrote as each part's remote.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from contextlib import contextmanager

from pyroute2 import IPRoute, netns
from pyroute2.netlink.exceptions import NetlinkError

from orchestrator.lab.netns import netlink
from orchestrator.lab.topology import VxlanLink

ALIAS_PREFIX = "aidclab:"
ETH_P_ALL = 0x0003


class VxlanError(RuntimeError):
    pass


@contextmanager
def _underlay(name: str | None) -> Iterator[IPRoute]:
    if name:
        with netlink(name, create=True) as ns:
            yield ns
        return
    ns = IPRoute()
    try:
        yield ns
    finally:
        ns.close()


def _temp_name(kind: str, vx: VxlanLink) -> str:
    # Unique per VNI in its namespace (a VNI is unique in a file): vxlan devices and veth host ends.
    return f"{kind}{vx.vni:x}"[:15]


def _vxlan_attrs(vx: VxlanLink) -> dict[str, object]:
    remote = ipaddress.ip_address(vx.remote)
    attrs: dict[str, object] = {
        "kind": "vxlan",
        "vxlan_id": vx.vni,
        "vxlan_port": vx.dst_port,
        "vxlan_learning": 0,
        "mtu": vx.mtu,
    }
    attrs["vxlan_group6" if remote.version == 6 else "vxlan_group"] = str(remote)
    if vx.src_port:
        attrs["vxlan_port_range"] = {"low": vx.src_port, "high": vx.src_port + 1}
    return attrs


def _where(vx: VxlanLink) -> str:
    return f"link {vx} (topology/links/{vx.index})"


def create_end(lab: str, vx: VxlanLink, pid: int, underlay_netns: str | None = None) -> None:
    """Create one VXLAN link end and put its node interface, still down, into the node ``pid``."""
    try:
        with _underlay(underlay_netns) as ul:
            tunnel = _temp_name("vxt", vx)
            ul.link("add", ifname=tunnel, **_vxlan_attrs(vx))
            tunnel_idx = ul.link_lookup(ifname=tunnel)[0]
            ul.link("set", index=tunnel_idx, ifalias=f"{ALIAS_PREFIX}{lab}")
            if not vx.stitched:
                ul.link("set", index=tunnel_idx, net_ns_pid=pid)
                moved = tunnel
            else:
                host_end = _temp_name("vxh", vx)
                moved = _temp_name("vxn", vx)
                ul.link(
                    "add", ifname=host_end, kind="veth", mtu=vx.mtu, peer={"ifname": moved, "mtu": vx.mtu}
                )
                host_idx = ul.link_lookup(ifname=host_end)[0]
                ul.link("set", index=host_idx, ifalias=f"{ALIAS_PREFIX}{lab}")
                ul.link("set", index=ul.link_lookup(ifname=moved)[0], net_ns_pid=pid)
                for a, b in ((tunnel_idx, host_idx), (host_idx, tunnel_idx)):
                    ul.tc("add", "ingress", a)
                    ul.tc(
                        "add-filter",
                        # u32 matching every frame: this kernel (and many) has no matchall classifier.
                        "u32",
                        a,
                        parent=0xFFFF0000,
                        protocol=ETH_P_ALL,
                        target=0x1,
                        keys=["0x0/0x0+0"],
                        action={"kind": "mirred", "direction": "egress", "action": "redirect", "ifindex": b},
                    )
                ul.link("set", index=host_idx, state="up")
                ul.link("set", index=tunnel_idx, state="up")
        with netlink(f"/proc/{pid}/ns/net") as ns:
            ns.link("set", index=ns.link_lookup(ifname=moved)[0], ifname=vx.endpoint.interface)
    except NetlinkError as exc:
        raise VxlanError(
            f"{_where(vx)}: netlink refused it: {exc.args[-1]} (errno {exc.code}); a VXLAN device with VNI "
            f"{vx.vni} on UDP {vx.dst_port} may already exist in the underlay namespace "
            f"{underlay_netns or '(host)'}: two parts on one machine need one underlay namespace each "
            "(`aidclab split --local` makes them)"
        ) from exc


def remove_lab_devices(lab: str | None, underlay_netns: str | None = None) -> int:
    """Delete every device aidclab left in the underlay namespace for ``lab`` (every lab if None)."""
    removed = 0
    wanted = f"{ALIAS_PREFIX}{lab}" if lab else ALIAS_PREFIX
    if underlay_netns and underlay_netns not in netns.listnetns():
        return 0
    with _underlay(underlay_netns) as ul:
        for msg in ul.get_links():
            alias = msg.get_attr("IFLA_IFALIAS") or ""
            if alias == wanted or (lab is None and alias.startswith(ALIAS_PREFIX)):
                try:
                    ul.link("del", index=msg["index"])
                    removed += 1
                except NetlinkError as exc:
                    if exc.code != 19:  # ENODEV: the veth peer's deletion took it already
                        raise
    return removed


def local_netns(prefix: str, part: str) -> str:
    """The namespace that stands in for host ``part`` (``local_underlay``)."""
    return f"{prefix}-{part}"


def _hub_netns(prefix: str) -> str:
    return f"{prefix}-ul"


def _local_names(prefix: str, parts: list[str]) -> list[str]:
    return [local_netns(prefix, p) for p in parts] + [_hub_netns(prefix)]


def local_underlay(parts: dict[str, str], prefix: str, mtu: int = 9500) -> dict[str, str]:
    """Stand-in hosts for parts side by side on one machine: namespace ``<prefix>-<part>`` holding the
    part's underlay address, all joined by a bridge in ``<prefix>-ul``. Returns part -> namespace.
    Idempotent: an existing setup is removed first."""
    remove_local_underlay(prefix, list(parts))
    hub = _hub_netns(prefix)
    netns.create(hub)
    out = {}
    with netlink(hub, create=True) as h:
        h.link("add", ifname="br0", kind="bridge", mtu=mtu)
        br = h.link_lookup(ifname="br0")[0]
        h.link("set", index=br, state="up")
        for i, (part, address) in enumerate(parts.items()):
            name = local_netns(prefix, part)
            netns.create(name)
            port = f"p{i}"
            h.link(
                "add",
                ifname=port,
                kind="veth",
                mtu=mtu,
                peer={"ifname": "ul0", "mtu": mtu, "net_ns_fd": name},
            )
            idx = h.link_lookup(ifname=port)[0]
            h.link("set", index=idx, master=br, state="up")
            with netlink(name, create=True) as ns:
                ul0 = ns.link_lookup(ifname="ul0")[0]
                addr = ipaddress.ip_address(address)
                ns.addr("add", index=ul0, address=str(addr), prefixlen=24 if addr.version == 4 else 64)
                ns.link("set", index=ul0, state="up")
                ns.link("set", index=ns.link_lookup(ifname="lo")[0], state="up")
            out[part] = name
    return out


def remove_local_underlay(prefix: str, parts: list[str]) -> int:
    """Remove the namespaces ``local_underlay`` made (devices in them go with them)."""
    removed = 0
    existing = set(netns.listnetns())
    for name in _local_names(prefix, parts):
        if name in existing:
            netns.remove(name)
            removed += 1
    return removed


def missing_local_underlay(prefix: str, parts: list[str]) -> list[str]:
    """The namespaces of ``local_underlay(prefix, parts)`` that do not exist."""
    existing = set(netns.listnetns())
    return [n for n in _local_names(prefix, parts) if n not in existing]
