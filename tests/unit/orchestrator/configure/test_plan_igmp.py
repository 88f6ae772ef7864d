"""The IGMP plan feature on leaf-spine: off by default (node files unchanged), the leaves' igmp sections
when on, timers that fit the wire at the lab's scale, proxy ports and listen-only ports, refusals."""

from __future__ import annotations

import pytest

from aidcnet.config import dump_config, parse_config
from orchestrator.configure.plan import LabVars, PlanError, build_plan, node_configs
from orchestrator.lab.topology import load_topology
from orchestrator.paths import LABS

TOPO = load_topology(LABS / "leaf-spine.clab.yml")


def configs(doc: dict):
    return node_configs(build_plan(TOPO, LabVars.model_validate(doc).with_source("test.vars.yml")))


def test_off_by_default() -> None:
    assert all(c.igmp is None for c in configs({}).values())


def test_leaves_get_sections_that_round_trip() -> None:
    out = configs({"igmp": {"enabled": True, "proxy_hosts": ["h1"], "querier_off": ["leaf2"]}})
    leaves = {n: c for n, c in out.items() if c.igmp is not None}
    assert leaves and all(c.bier and c.bier.host_ports for c in leaves.values())
    assert all(c.igmp is None for n, c in out.items() if n not in leaves)
    some = next(iter(leaves.values()))
    igmp = some.igmp
    assert igmp is not None
    # every leaf with hosts is a BFIR; every host's addresses map to its leaf's BFR-id
    assert igmp.bfirs == sorted(c.bier.bfr_id for c in leaves.values())  # type: ignore[union-attr]
    hosts = [c for c in out.values() if c.role == "gpu-host"]
    for h in hosts:
        assert h.loopback.ip in igmp.receivers
    # wall clock: QI 20 s, QRI 2 s, LMQI 0.2 s at the lab's scale
    t = igmp.timers()
    assert (t.qi, round(t.qri, 9), round(t.lmqi, 9)) == (20.0, 2.0, 0.2)
    proxy = [(n, p.name) for n, c in leaves.items() for p in c.igmp.ports if p.proxy]  # type: ignore[union-attr]
    assert len(proxy) == 1
    quiet = [p.querier for p in leaves["leaf2"].igmp.ports]  # type: ignore[union-attr]
    assert quiet and not any(quiet)
    for c in out.values():  # what Ansible writes reads back the same (idempotent configure)
        assert parse_config(__import__("yaml").safe_load(dump_config(c))) == c


def test_timers_that_do_not_fit_are_refused() -> None:
    with pytest.raises(PlanError, match="query_response_interval"):
        configs({"igmp": {"enabled": True, "query_response_interval": 10, "query_interval": 125}})


def test_unknown_proxy_host_is_refused() -> None:
    with pytest.raises(PlanError, match="not a gpu-host"):
        configs({"igmp": {"enabled": True, "proxy_hosts": ["spine1"]}})
