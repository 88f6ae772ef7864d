"""orchestrator.lab.netns.open_handle: a handle's netlink socket is opened inside the namespace, by a thread
that enters it, for every thread that uses the handle (the fabric sampler reads from its own), and the
orchestrator's own threads stay in the host's namespace. Namespaces made here (``nhA-<pid>-*``)."""

from __future__ import annotations

import os
import threading

import pytest

from orchestrator.lab.netns import open_handle
from tests.unit.fabric_netns import held_namespaces, require_root, require_tool, sh

PREFIX = f"nhA-{os.getpid()}"


def names(handle) -> set[str]:
    return {link.get_attr("IFLA_IFNAME") for link in handle.get_links()}


def test_a_handle_sees_its_namespace_from_every_thread_and_the_caller_stays_home():
    require_root()
    require_tool("ip", "iproute2")
    with held_namespaces(PREFIX, ("n1",)) as nodes:
        ns, pid = nodes["n1"]
        sh("ip", "-n", ns, "link", "add", "only-here", "type", "veth", "peer", "name", "only-here-b")
        home = open_handle(f"/proc/{os.getpid()}/ns/net")
        try:
            before = names(home)
            with open_handle(f"/proc/{pid}/ns/net") as by_pid, open_handle(ns) as by_name:
                assert names(by_pid) == names(by_name) == {"lo", "only-here", "only-here-b"}
                seen: list[set[str]] = []
                threads = [threading.Thread(target=lambda: seen.append(names(by_pid))) for _ in range(3)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                assert seen == [{"lo", "only-here", "only-here-b"}] * 3
            assert names(home) == before and "only-here" not in before
        finally:
            home.close()


def test_a_missing_namespace_is_file_not_found_and_never_created():
    require_root()
    with pytest.raises(FileNotFoundError):
        open_handle(f"{PREFIX}-missing")
    assert not os.path.exists(f"/run/netns/{PREFIX}-missing")
