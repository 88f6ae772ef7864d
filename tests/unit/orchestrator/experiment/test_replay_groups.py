"""Network-BIER replay: groups derived from a trace, merged into the plan, and the host agent's joins."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import struct
import time
from dataclasses import replace

import pytest

from aidcnet.modes import Mode
from aidcnet.replay import build_fragments
from orchestrator.configure.plan import LabVars, build_plan, node_configs
from orchestrator.experiment.replay_groups import POOL, ReplayGroupsError, derive_groups, groups_received
from orchestrator.lab.topology import load_topology
from orchestrator.paths import LABS as LABS_DIR
from orchestrator.workloads.trace import TraceOp

HOSTS = [f"h{i}" for i in range(1, 9)]
LABS = LABS_DIR


def _op(i: int, src: str, dst: list[str]) -> TraceOp:
    return TraceOp.model_validate(
        {"t": 0.0, "op": "multicast", "src": src, "dst": dst, "bytes": 100, "id": i}, context={"hosts": HOSTS}
    )


def test_one_group_per_source_and_receiver_set_in_order_of_first_appearance() -> None:
    ops = [
        _op(0, "h1", ["h3", "h2"]),
        _op(1, "h2", ["h1"]),
        _op(2, "h1", ["h2", "h3"]),  # same set as op 0, other order
        _op(3, "h3", ["h2", "h1"]),  # same receivers as nothing before from h3
        _op(4, "h1", ["h2", "h3", "h4"]),
    ]
    groups, op_group = derive_groups(ops)
    assert groups == [
        {"group": "239.100.0.0", "source": "h1", "receivers": ["h2", "h3"]},
        {"group": "239.100.0.1", "source": "h2", "receivers": ["h1"]},
        {"group": "239.100.0.2", "source": "h3", "receivers": ["h1", "h2"]},
        {"group": "239.100.0.3", "source": "h1", "receivers": ["h2", "h3", "h4"]},
    ]
    assert op_group == {
        0: "239.100.0.0",
        1: "239.100.0.1",
        2: "239.100.0.0",
        3: "239.100.0.2",
        4: "239.100.0.3",
    }
    # Deterministic: the same trace gives the same groups (a re-run changes no config).
    assert derive_groups(ops) == (groups, op_group)
    assert groups_received(groups, "h2") == ["239.100.0.0", "239.100.0.2", "239.100.0.3"]
    assert groups_received(groups, "h5") == []


def test_groups_the_vars_use_are_skipped() -> None:
    groups, _ = derive_groups([_op(0, "h1", ["h2"]), _op(1, "h1", ["h3"])], avoid=["239.100.0.0"])
    assert [g["group"] for g in groups] == ["239.100.0.1", "239.100.0.2"]


def test_running_out_of_groups_says_so() -> None:
    pool = ipaddress.IPv4Network("239.100.0.0/31")
    ops = [_op(0, "h1", ["h2"]), _op(1, "h1", ["h3"]), _op(2, "h1", ["h2"])]
    derive_groups(ops[:2], pool=pool)
    with pytest.raises(ReplayGroupsError, match=r"239\.100\.0\.0/31 pool holds \(2 free groups; op 2"):
        derive_groups([*ops[:2], _op(2, "h1", ["h4"])], pool=pool)
    assert POOL.num_addresses == 65536


def test_extra_groups_join_the_vars_groups_in_the_plan_only() -> None:
    topo = load_topology(LABS / "leaf-spine.clab.yml")
    user = {"group": "239.1.1.1", "receivers": ["h2"]}
    lab_vars = LabVars.model_validate({"bier": {"groups": [user]}}).with_source("labs/x.vars.yml")
    groups, _ = derive_groups([_op(0, "h1", ["h3", "h5"]), _op(1, "h3", ["h1"])])
    plan = build_plan(topo, lab_vars, extra_groups=groups)
    assert [str(g.group) for g in plan.bier.groups] == ["239.1.1.1", "239.100.0.0", "239.100.0.1"]
    assert (
        lab_vars.bier.groups[0].group == ipaddress.IPv4Address("239.1.1.1") and len(lab_vars.bier.groups) == 1
    )
    assert plan.vars == "labs/x.vars.yml"
    configs = node_configs(plan)
    leaf1 = configs["leaf1"].bier
    h1 = plan.nodes["h1"].loopback
    assert h1 is not None
    sg = [f for f in leaf1.flows if str(f.group) == "239.100.0.0"]
    assert len(sg) == 1 and sg[0].source == h1.ip
    assert sorted(sg[0].bfers) == sorted([configs["leaf2"].bier.bfr_id, configs["leaf3"].bier.bfr_id])
    # Only the leaves carry groups: host and spine configs are the same with or without them.
    bare = node_configs(build_plan(topo, lab_vars))
    changed = sorted(n for n in configs if configs[n] != bare[n])
    assert changed == ["leaf1", "leaf2", "leaf3", "leaf4"]
    assert node_configs(build_plan(topo, lab_vars, extra_groups=groups)) == configs


def _free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("0.0.0.0", 0))
        return s.getsockname()[1]


def test_joined_groups_reach_the_reassembly_once_across_several_sockets(monkeypatch) -> None:
    from aidcnet.agent.replay import service as rs
    from aidcnet.agent.replay.protocol import ReplayLoad

    port = _free_udp_port()
    # Two joins per socket: three groups need two sockets, and neither may see the other's groups.
    monkeypatch.setattr(rs, "max_memberships", lambda: 2)
    groups = ("239.100.0.0", "239.100.0.1", "239.100.0.2")

    async def run() -> dict:
        svc = rs.ReplayService("127.0.0.1", port=port)
        await svc.listen()
        try:
            reply = svc.load(ReplayLoad(Mode.NET_BIER, interface="lo", groups=groups).to_wire())
            assert reply["groups"] == 3 and len(svc._group_readers) == 2
            tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            tx.setsockopt(
                socket.IPPROTO_IP,
                socket.IP_MULTICAST_IF,
                struct.pack("4s4si", b"\0" * 4, b"\0" * 4, socket.if_nametoindex("lo")),
            )
            tx.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 1)
            for k, g in enumerate(groups):
                for frag in build_fragments(k, 100, time.time_ns()):
                    tx.sendto(frag, (g, port))
            # A group nobody joined must not be received.
            for frag in build_fragments(9, 100, time.time_ns()):
                tx.sendto(frag, ("239.100.0.9", port))
            tx.close()
            await asyncio.sleep(0.3)
            out = svc.results()
            assert svc.groups == [] and svc._group_readers == []  # results() after the run leaves them
            return out
        finally:
            svc.close()

    out = asyncio.run(run())
    recs = {r["id"]: r for r in out["records"]}
    assert sorted(recs) == [0, 1, 2]
    assert all(r["checksum_ok"] and r["duplicates"] == 0 for r in recs.values())


def test_net_bier_load_needs_a_group_per_op_and_an_interface() -> None:
    from aidcnet.agent.replay.protocol import Receiver, ReplayLoad, ReplayOp
    from aidcnet.agent.replay.service import ReplayService

    svc = ReplayService("127.0.0.1")
    base = ReplayLoad(Mode.NET_BIER, receivers={"h2": Receiver("10.0.0.2")}, interface="lo")
    op = ReplayOp(0, 0.0, 100, ("h2",), "239.100.0.0")
    with pytest.raises(ValueError, match=r"net-bier op 0 needs its multicast group \(group\)"):
        svc.load(replace(base, ops=(replace(op, group=None),)).to_wire())
    with pytest.raises(ValueError, match=r"ops\.0\.group: '10\.1\.1\.1' is not an IPv4 multicast group"):
        svc.load({**replace(base, ops=(op,)).to_wire(), "ops": [{**op.to_wire(), "group": "10.1.1.1"}]})
    with pytest.raises(ValueError, match="fabric interface"):
        svc.load(replace(base, interface=None, ops=(op,)).to_wire())
    with pytest.raises(ValueError, match="does not exist"):
        svc.load(replace(base, interface="nope0", ops=(op,)).to_wire())
    with pytest.raises(ValueError, match="receiver 'h3' is not in the request's receivers"):
        svc.load(replace(base, ops=(replace(op, receivers=("h3",)),)).to_wire())
    reply = svc.load(replace(base, ops=(op,)).to_wire())
    assert reply == {"ok": True, "ops": 1, "mode": "net-bier", "groups": 0}
    assert svc.ops == [op]
