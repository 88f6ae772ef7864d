"""The agent side of BFD: sockets and timers around :mod:`aidcnet.bfd`."""
