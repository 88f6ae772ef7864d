"""The INA switch service: a thin shell around :class:`aidcnet.ina.aggregator.Aggregator`.

It listens on UDP 4792 of every address of the switch. Each INA packet gets one decision from the
aggregator (seed draft 002 §2.1): absorbed into its slot; forwarded unchanged toward the root (the AND
test of A-BM and P-BM failed, or this switch is only a transit hop of the job); the finished aggregate
sent toward the parent with P-BM = A-BM; at the VAT root, the result multicast by BIER with
BitString = A-BM (§2.2) through this switch's own BFR dataplane; or dropped, with the reason counted.

Packets move hop by hop between link addresses, like BIER copies: a worker sends to its first hop, and
every switch sends to its configured next hop toward the root, so every INA switch on the path sees
the packet and can run the AND test on it.

Counters (``aidcnet ctl show counters``, Prometheus ``aidcnet_ina_*``): ``ina.rx.packets``/``bytes``,
``ina.tx.packets``/``bytes``, ``ina.<outcome>`` for forwarded, transit, aggregated, completed,
resend-result and disseminated, and ``ina.dropped.<reason>`` for every drop: the aggregator's reasons
(slot-budget-exceeded, duplicate, stale-chunk, pbm-outside-abm, ...), ``malformed-<decode reason>``,
``no-next-hop`` (a transit packet of a job this switch has no route for), ``no-bier`` (a root without
a BIER dataplane), ``tx-error`` and ``internal-error`` (a bug; logged with the job and chunk).

Sends push back (``IP_RECVERR``, :class:`aidcnet.agent.outbox.Outbox`): a datagram a full shaper queue
refuses waits and is sent again (``ina.tx.nobufs``, ``ina.tx.deferred``, ``ina.tx.backlog``); only a
full backlog drops (``ina.dropped.backlog-full``). Results leave by the BIER dataplane, not by this
socket.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections import Counter
from typing import Any

from aidcnet.agent.outbox import Outbox
from aidcnet.bier.bitstring import ids_from_bitstring
from aidcnet.bier.header import BierProto
from aidcnet.config import Ina, InaJob
from aidcnet.ina.aggregator import Aggregator, JobConfig
from aidcnet.ina.header import InaDecodeError, InaHeader
from aidcnet.ina.vat import Action
from aidcnet.ipv4 import build_udp
from aidcnet.udpio import (
    BatchIO,
    Datagram,
    drain_error_queue,
    enable_backpressure,
    set_socket_buffer,
    shaped_sndbuf,
)

log = logging.getLogger("aidcnet.ina.switch")

# Results are wrapped as IPv4/UDP from the root's loopback to this SSM group, INA port to INA port,
# inside the BIER packet; hosts recognise them by the UDP destination port.
RESULT_GROUP = "232.1.0.2"
_BUF = 32 << 20
# Outcomes that are not drops, for the counter names (everything else is ina.dropped.<reason>).
NOT_DROPS = frozenset({"forwarded", "transit", "aggregated", "completed", "resend-result"})


def job_config(job: InaJob, bsl: int) -> JobConfig:
    return JobConfig(
        job_id=job.job_id,
        bsl=bsl,
        abm=tuple(job.abm),
        op=job.op,
        dtype=job.dtype,
        root=job.root,
        parent=job.parent,
        slot_budget=job.slot_budget,
    )


class InaSwitchService:
    def __init__(
        self,
        ina: Ina,
        bsl: int,
        loopback: str,
        bier: Any = None,
        queue_bytes: int | None = None,
    ) -> None:
        self.ina = ina
        self.bsl = bsl
        self.loopback = loopback
        self.bier = bier  # BierService of this switch: the root disseminates through its dataplane
        self.aggregator = Aggregator(job_config(j, bsl) for j in ina.jobs)
        self.next_hop: dict[int, str] = {j.job_id: str(j.next_hop) for j in ina.jobs if j.next_hop}
        self.next_hop.update({t.job_id: str(t.next_hop) for t in ina.transit})
        self.c: Counter[str] = Counter()
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            set_socket_buffer(self.sock, socket.SO_RCVBUF, _BUF)
            # Shaped: the socket's memory below the smallest queue (it fills first: EAGAIN), IP_RECVERR for
            # the rest (ENOBUFS); the Outbox resends both.
            enable_backpressure(self.sock, sndbuf=shaped_sndbuf(queue_bytes) or _BUF)
            self.sock.bind(("0.0.0.0", ina.port))
            self.sock.setblocking(False)
            self.io = BatchIO(self.sock)
            self.out = Outbox(self.io)
        except BaseException:
            self.sock.close()
            raise

    # -- packet path ------------------------------------------------------------------------------
    def poll_once(self) -> int:
        try:
            pkts = self.io.recv()
        except OSError as exc:
            self.c["rx.errors"] += 1
            # With IP_RECVERR an ICMP error (port unreachable, ...) fails one receive: read it off.
            drained = drain_error_queue(self.sock)
            if not drained:
                log.warning("receive failed: %s", exc)
            return 0
        out: list[Datagram] = []
        c = self.c
        for buf, _src in pkts:
            c["rx.packets"] += 1
            c["rx.bytes"] += len(buf)
            try:
                hdr = InaHeader.decode(buf)
            except InaDecodeError as exc:
                c["dropped.malformed-" + exc.reason] += 1
                continue
            try:
                self._decide(hdr, buf, out)
            except Exception:
                # A bug met by one packet must not stop aggregation for every other job.
                c["dropped.internal-error"] += 1
                log.exception("INA packet of job %d chunk %d failed", hdr.job_id, hdr.chunk)
        if out:
            self._send(out)
        return len(pkts)

    def _decide(self, hdr: InaHeader, buf: bytes | memoryview, out: list[Datagram]) -> None:
        c = self.c
        decision = self.aggregator.handle(hdr)
        action = decision.action
        if action is Action.ABSORB:
            c["aggregated"] += 1
        elif action is Action.FORWARD:
            c[decision.reason] += 1
            hop = self.next_hop.get(hdr.job_id)
            if hop is None:
                c["dropped.no-next-hop"] += 1
            else:
                out.append((bytes(buf), (hop, self.ina.port)))
        elif action is Action.TO_PARENT:
            c[decision.reason] += 1
            assert decision.packet is not None
            out.append((decision.packet.encode(), (self.next_hop[hdr.job_id], self.ina.port)))
        elif action is Action.DISSEMINATE:
            c[decision.reason] += 1
            assert decision.packet is not None
            self._disseminate(decision.packet, decision.si, decision.bitstring)
        else:
            c["dropped." + decision.reason] += 1

    def _disseminate(self, packet: InaHeader, si: int, bitstring: int) -> None:
        """The draft's §2.2: the root is the BFIR, the workers of its A-BM the BFERs."""
        if self.bier is None:
            self.c["dropped.no-bier"] += 1
            return
        datagram = build_udp(self.loopback, RESULT_GROUP, self.ina.port, self.ina.port, packet.encode())
        receivers = ids_from_bitstring(si, bitstring, self.bsl)
        self.bier.dataplane.impose(datagram, receivers, proto=BierProto.IPV4, entropy=packet.chunk & 0xFFFFF)
        self.c["disseminated"] += 1

    def _send(self, out: list[Datagram]) -> None:
        self.out.send(out)

    def drain(self, max_batches: int = 16) -> None:
        for _ in range(max_batches):
            if self.poll_once() < self.io.max_msgs:
                break

    # -- lifecycle and control --------------------------------------------------------------------
    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        self.out.attach(loop)
        loop.add_reader(self.sock.fileno(), self.drain)

    def close(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        if loop is not None:
            loop.remove_reader(self.sock.fileno())
        self.out.close()
        self.sock.close()

    def reset(self, job_id: int) -> bool:
        """Forget every slot of a job (a new AllReduce generation restarts its chunk numbers)."""
        cfg = self.aggregator.job(job_id)
        if cfg is None:
            return False
        self.aggregator.add_job(cfg)
        return True

    def counters(self) -> dict[str, int]:
        c = self.c.copy()
        box = self.out
        c["tx.packets"], c["tx.bytes"] = box.sent, box.sent_bytes
        c["tx.nobufs"], c["tx.deferred"], c["tx.backlog"] = box.nobufs, box.deferred, len(box.backlog)
        c["tx.icmp-errors"] = box.icmp_errors
        if box.refused:
            c["dropped.tx-error"] = box.refused
        if box.overflow:
            c["dropped.backlog-full"] = box.overflow
        out = {f"ina.{k}": v for k, v in c.items()}
        for k in ("rx.packets", "rx.bytes", "tx.packets", "tx.bytes", "aggregated", "completed", "forwarded"):
            out.setdefault(f"ina.{k}", 0)
        return out

    def show(self) -> dict[str, Any]:
        jobs = []
        for j in self.ina.jobs:
            jobs.append(
                {
                    "job": j.job_id,
                    "abm": j.abm,
                    "root": j.root,
                    "parent": j.parent,
                    "next_hop": self.next_hop.get(j.job_id),
                    "op": j.op,
                    "dtype": j.dtype,
                    "slot_budget": j.slot_budget,
                    "slots_in_use": self.aggregator.slots_in_use(j.job_id),
                }
            )
        transit = [{"job": t.job_id, "next_hop": str(t.next_hop)} for t in self.ina.transit]
        return {"port": self.ina.port, "jobs": jobs, "transit": transit}
