"""``AgentClient``: one typed method per control operation (:class:`aidcnet.agent.control.Op`).

The same client serves ``aidcnet ctl`` inside a node and the orchestrator on the host, which reaches a
node's socket through its mount namespace (:meth:`AgentClient.for_pid`): cheaper than a ``docker exec``
per request, which would cost more than replaying a small trace.

A reply with ``ok: false`` raises :class:`AgentError`, which names the node and the operation and keeps
the agent's ``problems`` and ``kept`` fields (a rejected node file says which fields and which config
stayed in force).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aidcnet.agent.control import ControlError, Op, request
from aidcnet.agent.replay.protocol import ReplayLoad
from aidcnet.paths import CONTROL_SOCKET


class AgentError(ControlError):
    """The agent answered, and said no."""

    def __init__(self, node: str, op: Op, reply: dict[str, Any]):
        self.node = node
        self.op = op
        self.reply = reply
        self.problems: list[str] = list(reply.get("problems") or [])
        self.kept: str | None = reply.get("kept")
        super().__init__(f"node {node}: {op}: {reply.get('error')}")


class AgentClient:
    def __init__(self, path: Path = CONTROL_SOCKET, node: str = "this node", timeout: float = 10.0):
        self.path = path
        self.node = node
        self.timeout = timeout

    @classmethod
    def for_pid(cls, pid: int, node: str, timeout: float = 10.0) -> AgentClient:
        """The agent of the container whose init has ``pid``, seen from the host."""
        return cls(Path(f"/proc/{pid}/root") / str(CONTROL_SOCKET).lstrip("/"), node, timeout)

    def call(self, op: Op, timeout: float | None = None, **fields: Any) -> dict[str, Any]:
        """One request; the reply on success, :class:`AgentError` on a refusal, :class:`ControlError`
        when nobody answers."""
        try:
            wait = self.timeout if timeout is None else timeout
            reply = request(op, timeout=wait, path=self.path, **fields)
        except ControlError as exc:
            raise ControlError(f"node {self.node}: {exc}") from exc
        if not reply.get("ok"):
            raise AgentError(self.node, op, reply)
        return reply

    # -- state ----------------------------------------------------------------------------------------
    def health(self, timeout: float | None = None) -> dict[str, Any]:
        return self.call(Op.HEALTH, timeout)

    def counters(self, timeout: float | None = None) -> dict[str, int]:
        return self.call(Op.COUNTERS, timeout)["counters"]

    def config(self) -> dict[str, Any] | None:
        return self.call(Op.CONFIG)["config"]

    def reload(self, file: str | None = None) -> dict[str, Any]:
        return self.call(Op.RELOAD, **({"file": file} if file else {}))

    def restart(self) -> dict[str, Any]:
        """The agent restarts in place (same pid, a fresh program); it answers before it goes."""
        return self.call(Op.RESTART)

    def validate(self, file: str) -> dict[str, Any]:
        return self.call(Op.VALIDATE, file=file)

    def set_time_scale(self, time_scale: int | None) -> dict[str, Any]:
        """Run at another time scale (None: unshaped) until the next node file: what a scale search and
        ``replay --confirm`` change between runs, with the links' shapers."""
        return self.call(Op.TIME_SCALE, time_scale=time_scale)

    def igmp(self) -> dict[str, Any]:
        """``show igmp``: per-port memberships, querier state, BFER tables, proxy channels, flows."""
        return self.call(Op.IGMP)

    def bift(self) -> dict[str, Any]:
        return self.call(Op.BIFT)

    # -- host-BIER ------------------------------------------------------------------------------------
    def bier_send(
        self,
        receivers: list[int],
        count: int = 1,
        size: int = 64,
        tag: str = "t",
        entropy: int = 0,
        payloads: list[bytes] | None = None,
    ) -> dict[str, Any]:
        fields: dict[str, Any] = {"receivers": receivers, "entropy": entropy}
        if payloads is not None:
            fields["payloads"] = [p.hex() for p in payloads]
        else:
            fields.update(count=count, size=size, tag=tag)
        return self.call(Op.BIER_SEND, **fields)

    def bier_received(self, clear: bool = False) -> list[Any]:
        return self.call(Op.BIER_RECEIVED, clear=clear)["received"]

    # -- replay ---------------------------------------------------------------------------------------
    def replay_load(self, load: ReplayLoad) -> dict[str, Any]:
        """Load this host's part of a run, in as many requests as the control socket's line needs (the
        first with the settings, then appends); the last reply (its counts are the whole load's)."""
        reply: dict[str, Any] = {}
        for line in load.lines():
            reply = self.call(Op.REPLAY_LOAD, **line.to_wire())
        return reply

    def replay_start(self, start_ns: int) -> dict[str, Any]:
        return self.call(Op.REPLAY_START, start_ns=start_ns)

    def replay_status(self, timeout: float | None = None) -> dict[str, Any]:
        return self.call(Op.REPLAY_STATUS, timeout)

    def replay_results(self, timeout: float | None = None) -> list[dict[str, Any]]:
        return self.call(Op.REPLAY_RESULTS, timeout)["records"]

    def replay_stop(self, timeout: float | None = None) -> dict[str, Any]:
        return self.call(Op.REPLAY_STOP, timeout)

    # -- INA ------------------------------------------------------------------------------------------
    def ina(self) -> dict[str, Any]:
        return self.call(Op.INA)

    def ina_reset(self, job: int) -> dict[str, Any]:
        return self.call(Op.INA_RESET, job=job)

    def reliable_reset(self, round_trip_s: float = 0.0) -> dict[str, Any]:
        return self.call(Op.RELIABLE_RESET, round_trip_s=round_trip_s)

    def allreduce(self, timeout: float | None = None, **fields: Any) -> dict[str, Any]:
        return self.call(Op.ALLREDUCE, timeout, **fields)

    def ps_serve(self, **fields: Any) -> dict[str, Any]:
        return self.call(Op.PS_SERVE, **fields)

    # -- BGP and FARE ---------------------------------------------------------------------------------
    def bgp(self) -> dict[str, Any]:
        return self.call(Op.BGP)

    def bgp_link(self, interface: str, bandwidth: str) -> dict[str, Any]:
        return self.call(Op.BGP_LINK, interface=interface, bandwidth=bandwidth)

    def fare_send(
        self, dst: str, mode: str | None = None, timeout: float | None = None, **fields: Any
    ) -> dict[str, Any]:
        return self.call(Op.FARE_SEND, timeout, dst=dst, **({"mode": mode} if mode else {}), **fields)
