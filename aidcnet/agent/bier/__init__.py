"""The agent's BIER service and its dataplanes: the service (``service``), the Python reference dataplane
(``dataplane``), the tc/eBPF fast path (``ebpf``), the network-BIER leaf edge (``net_bier``) and the
host-BIER API a GPU host sends through (``host``). The protocol logic is :mod:`aidcnet.bier`'s."""
