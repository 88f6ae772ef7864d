"""The agent's IGMPv3 service at the leaves (queriers, Receiver Proxy Reports, the BFER overlay). The
protocol logic is :mod:`aidcnet.igmp`'s."""
