"""IGMP for aidclab (docs/igmp.md): the IGMPv3 codec with RFC 9279 extensions, the RFC 3376 §6 router
state machine, and the BFIR's membership tables (IGMP over BIER, the Receiver Proxy Report).

Pure logic: no sockets and no clock; every function that needs the time takes ``now``.
"""
