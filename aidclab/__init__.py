"""aidclab, as users import it: the pytest plugin (:mod:`aidclab.pytest`).

The testbed's code lives in ``orchestrator/`` (host side, the ``aidclab`` command) and ``aidcnet/``
(inside the nodes); this package holds only what a user's own code imports by the tool's name.
"""
