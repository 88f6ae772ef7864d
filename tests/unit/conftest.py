"""Fixtures shared by the unit tests."""

from tests.unit.fabric_netns import veth_pair  # noqa: F401  (two namespaces joined by a veth)
