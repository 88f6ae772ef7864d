"""The agent's BGP underlay: ExaBGP driven through its process API (``service``) and the FARE senders
of a GPU host (``fare_sender``). The RIB and the attributes are :mod:`aidcnet.bgp`'s and
:mod:`aidcnet.fare`'s."""
