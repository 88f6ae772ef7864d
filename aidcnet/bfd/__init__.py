"""Link liveness in fabric time: BFD control packets (RFC 5880) over single-hop UDP (RFC 5881), with a
loss threshold on top that catches a link that drops only part of what crosses it (a gray failure).
Pure: the agent's service (``aidcnet.agent.bfd``) owns the sockets and the clock."""
