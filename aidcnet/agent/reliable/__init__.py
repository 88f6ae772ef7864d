"""The agent's reliable P2MP transport: the per-node endpoint and aggregator (``node``) and the service
that runs it over the node's sockets (``service``). The protocol logic is :mod:`aidcnet.reliable`'s."""
