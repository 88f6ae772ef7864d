"""INA: the Virtual Aggregation Tree of every AllReduce job (seed draft 002 §2.1), mapped on the lab.

The vars give, per job, the workers, the VAT root and the A-BM of every VAT switch as worker names
(``ina.jobs``; docs/allreduce.md). This module turns names into BFR-ids (the A-BM is a BIER BitString,
§2.3), derives each VAT node's parent (the VAT node with the smallest A-BM strictly containing its
own) and the hop-by-hop path toward the root that INA packets follow: a worker sends to its first hop,
every switch on the way either aggregates (its A-BM meets the P-BM) or passes the packet on toward the
root. The path is the first of the equal-cost next hops of the static routes, so it is deterministic
and the same one the switches are given.

Checked here, so that a job that could never complete is refused before anything is deployed: every
worker is a BFR gpu-host, every VAT node and every transit switch is an ``ina-switch``, the A-BMs nest
(two VAT nodes' A-BMs are disjoint or one contains the other), the root's A-BM is every worker, and
along each sender's path the first VAT node whose A-BM meets the sender's bits is its parent.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from aidcnet.config import Ina, InaJob, InaMember, InaTransit
from aidcnet.roles import Role
from orchestrator.configure.plan.context import Context, natural_key, problem
from orchestrator.configure.plan.schema import InaJobVars, LabPlan, PlanInaJob, PlanVatNode

INA_ROLE = Role.INA_SWITCH


def apply(plan: LabPlan, ctx: Context) -> LabPlan:
    jobs, _ = ctx.setting("ina.jobs")
    seen: dict[int, int] = {}
    plan.ina = []
    for index, job in enumerate(jobs or []):
        where = f"ina.jobs.{index}"
        if job.job in seen:
            raise problem(
                ctx.vars_source(f"{where}.job"), f"job {job.job} is defined at ina.jobs.{seen[job.job]} too"
            )
        seen[job.job] = index
        plan.ina.append(plan_job(plan, ctx, where, job))
    return plan


def _first_hop(plan: LabPlan, here: str, to: str) -> tuple[str, ipaddress.IPv4Address] | None:
    for route in plan.nodes[here].routes:
        if route.to == to and route.nexthops:
            hop = route.nexthops[0]
            return hop.neighbor, hop.via
    return None


def plan_job(plan: LabPlan, ctx: Context, where: str, job: InaJobVars) -> PlanInaJob:
    src = ctx.vars_source
    op = job.op or ctx.setting("ina.op")[0]
    dtype = job.dtype or ctx.setting("ina.dtype")[0]
    budget = job.slot_budget or ctx.setting("ina.slot_budget")[0]
    if op == "prod" and dtype == "fixed32":
        raise problem(src(f"{where}.dtype"), "fixed32 cannot carry prod (the scales of a product add up)")
    bfr = _worker_bfr_ids(plan, src, where, job)
    abms = _abms(plan, src, where, job)
    vat, transit, first_hop = _tree(plan, src, where, job, abms, bfr)
    return PlanInaJob(
        job=job.job,
        workers=sorted(job.workers, key=natural_key),
        worker_bfr_ids=sorted(bfr.values()),
        root=job.root,
        op=op,
        dtype=dtype,
        slot_budget=budget,
        window=max(1, budget // 2),
        vat=dict(sorted(vat.items(), key=lambda kv: natural_key(kv[0]))),
        transit=dict(sorted(transit.items(), key=lambda kv: natural_key(kv[0]))),
        first_hop=dict(sorted(first_hop.items(), key=lambda kv: natural_key(kv[0]))),
    )


def _worker_bfr_ids(plan: LabPlan, src: Any, where: str, job: InaJobVars) -> dict[str, int]:
    """Each worker's BFR-id (its bit in the A-BMs); all in one SI, since one INA packet carries one."""
    if len(set(job.workers)) != len(job.workers):
        raise problem(src(f"{where}.workers"), "a worker is listed twice")
    bfr: dict[str, int] = {}
    for w in job.workers:
        node = plan.nodes.get(w)
        if node is None or node.role != Role.GPU_HOST:
            raise problem(src(f"{where}.workers"), f"{w!r} is not a {Role.GPU_HOST} node of this lab")
        if node.bfr_id is None:
            raise problem(src(f"{where}.workers"), f"{w} has no BFR-id, so it cannot be a bit of an A-BM")
        bfr[w] = node.bfr_id
    bsl = plan.bier.bsl
    if len({(i - 1) // bsl for i in bfr.values()}) > 1:
        raise problem(
            src(f"{where}.workers"),
            f"the workers' BFR-ids {sorted(bfr.values())} span several SIs at BSL {bsl}: one INA packet "
            "carries one SI (raise bier.bsl or pin the workers' bfr_id)",
        )
    return bfr


def _abms(plan: LabPlan, src: Any, where: str, job: InaJobVars) -> dict[str, frozenset[str]]:
    """The A-BM of every VAT switch (the root's is every worker), checked to form a tree."""
    abms: dict[str, frozenset[str]] = {}
    for switch, members in job.abm.items():
        if switch not in plan.nodes or plan.nodes[switch].role != INA_ROLE:
            raise problem(src(f"{where}.abm.{switch}"), f"{switch!r} is not an {INA_ROLE} node of this lab")
        outside = sorted(set(members) - set(job.workers), key=natural_key)
        if outside:
            raise problem(src(f"{where}.abm.{switch}"), f"{', '.join(outside)} not in the job's workers")
        if not members:
            raise problem(src(f"{where}.abm.{switch}"), "an A-BM needs at least one worker")
        abms[switch] = frozenset(members)
    if job.root not in plan.nodes or plan.nodes[job.root].role != INA_ROLE:
        raise problem(src(f"{where}.root"), f"{job.root!r} is not an {INA_ROLE} node of this lab")
    everyone = frozenset(job.workers)
    if abms.setdefault(job.root, everyone) != everyone:
        raise problem(src(f"{where}.abm.{job.root}"), "the root's A-BM must hold every worker of the job")
    names = sorted(abms, key=natural_key)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            x, y = abms[a], abms[b]
            if x & y and not (x <= y or y <= x):
                raise problem(
                    src(f"{where}.abm"),
                    f"the A-BMs of {a} and {b} overlap without one containing the other: no tree has them",
                )
            if x == y:
                raise problem(src(f"{where}.abm"), f"{a} and {b} have the same A-BM; one is redundant")
    return abms


def _tree(
    plan: LabPlan,
    src: Any,
    where: str,
    job: InaJobVars,
    abms: dict[str, frozenset[str]],
    bfr: dict[str, int],
) -> tuple[dict[str, PlanVatNode], dict[str, ipaddress.IPv4Address], dict[str, ipaddress.IPv4Address]]:
    """The VAT nodes with parents and next hops, the transit switches and each worker's first hop, by
    following the unicast paths toward the root: each packet must meet its parent first."""
    names = sorted(abms, key=natural_key)

    def parent_of(members: frozenset[str]) -> str | None:
        above = [s for s in names if members < abms[s]]
        return min(above, key=lambda s: (len(abms[s]), natural_key(s))) if above else None

    vat: dict[str, PlanVatNode] = {}
    transit: dict[str, ipaddress.IPv4Address] = {}
    first_hop: dict[str, ipaddress.IPv4Address] = {}

    def walk(sender: str, bits: frozenset[str], expect: str) -> None:
        """Follow the path from ``sender`` toward the root; the first VAT node meeting ``bits`` must be
        ``expect``, and every other switch on the way becomes a transit hop of the job."""
        here = sender
        for _ in range(len(plan.nodes)):
            hop = _first_hop(plan, here, job.root)
            if hop is None:
                raise problem(src(f"{where}.root"), f"{here} has no route to the root {job.root}")
            nxt, via = hop
            if here == sender and plan.nodes[sender].role == Role.GPU_HOST:
                first_hop[sender] = via
            elif here != sender and here not in abms:
                transit[here] = via
            if plan.nodes[nxt].role != INA_ROLE:
                raise problem(
                    src(f"{where}"),
                    f"{nxt} ({plan.nodes[nxt].role}) is on the path from {sender} to the root {job.root}; "
                    f"every switch an INA packet crosses must be an {INA_ROLE}",
                )
            if nxt in abms and abms[nxt] & bits:
                if nxt != expect:
                    raise problem(
                        src(f"{where}.abm"),
                        f"packets from {sender} meet {nxt} before their parent {expect} on the way to "
                        f"{job.root}: {nxt}'s A-BM must not include "
                        f"{', '.join(sorted(bits, key=natural_key))}",
                    )
                return
            here = nxt
        raise problem(src(f"{where}.root"), f"the path from {sender} never reaches {job.root}")

    for w in sorted(job.workers, key=natural_key):
        walk(w, frozenset({w}), parent_of(frozenset({w})) or job.root)
    for s in names:
        parent = parent_of(abms[s])
        next_hop = None
        if s != job.root:
            assert parent is not None  # the root's A-BM holds everything
            walk(s, abms[s], parent)
            hop = _first_hop(plan, s, job.root)
            assert hop is not None
            next_hop = hop[1]
        members = sorted(abms[s], key=natural_key)
        vat[s] = PlanVatNode(
            abm=members, abm_bfr_ids=sorted(bfr[w] for w in members), parent=parent, next_hop=next_hop
        )
    return vat, transit, first_hop


def ina_config(plan: LabPlan, name: str) -> Ina | None:
    """The node file's ``ina`` section: VAT nodes and transit hops on a switch, memberships on a host."""
    jobs, transit, members = [], [], []
    for job in plan.ina:
        node = job.vat.get(name)
        if node is not None:
            jobs.append(
                InaJob(
                    job_id=job.job,
                    abm=node.abm_bfr_ids,
                    root=name == job.root,
                    parent=node.parent,
                    op=job.op,
                    dtype=job.dtype,
                    slot_budget=job.slot_budget,
                    next_hop=node.next_hop,
                )
            )
        if name in job.transit:
            transit.append(InaTransit(job_id=job.job, next_hop=job.transit[name]))
        if name in job.first_hop:
            members.append(
                InaMember(
                    job_id=job.job,
                    workers=job.worker_bfr_ids,
                    next_hop=job.first_hop[name],
                    root=job.root,
                    op=job.op,
                    dtype=job.dtype,
                    window=job.window,
                )
            )
    if not (jobs or transit or members):
        # Every ina-switch runs the INA socket, even with no job yet: an empty section says so.
        return Ina() if plan.nodes[name].role == INA_ROLE else None
    return Ina(jobs=jobs, transit=transit, members=members)
