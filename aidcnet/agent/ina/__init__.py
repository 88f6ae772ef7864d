"""The agent's in-network aggregation: the switch service (``switch``), the worker, ring and parameter
server of a GPU host (``worker``) and the part that builds them (``service``). The aggregation logic is
:mod:`aidcnet.ina`'s."""
