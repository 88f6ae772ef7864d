"""Reliable BIER delivery, pure logic (docs/reliability.md): no I/O, no sockets, time is a parameter.

- ``serial``: sequence numbers with RFC 1982 serial arithmetic (32 bits)
- ``header``: DATA, ACK, NACK and AGG-ACK codec; one error class with a countable reason
- ``sender``: the BFIR's send window, retransmission timer (injected RTO), subset retransmission,
  receiver failure
- ``receiver``: in-order exactly-once delivery, cumulative ACKs with gaps, NACKs
- ``aggregator``: a BFR's in-network ACK aggregation with a bounded, expiring state
- ``sim``: a discrete-event simulation of one flow over host-BIER on leaf-spine (tests, benches)
"""
