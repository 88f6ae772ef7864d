"""The host agent's side of a trace replay: the service that keeps the schedule of this host's ops and the
receiver accounting (``service``), what travels over the control socket for it (``protocol``), one sender
per family of modes (``senders``), the membership modes' signalling (``signalling``) and the replay port's
sockets (``sockets``). The payload and its reassembly are :mod:`aidcnet.replay`'s."""
