"""The agent's link watch against a real kernel, in namespaces ``lw-<pid>-<n>``: the dump lists every link
with its state, and the watch hears carrier going and coming back. Needs root and iproute2 (fabric_netns
fails the test naming what is missing)."""

from __future__ import annotations

import asyncio
import subprocess

from aidcnet.agent.kernel import LinkWatch, dump_links
from tests.dataplane.netlab import in_netns
from tests.unit.fabric_netns import make_uplinks


def test_dump_lists_every_link_and_the_watch_hears_carrier_change() -> None:
    with make_uplinks("lw", 2) as (ns, far):
        with in_netns(ns):
            links = {link.name: link for link in dump_links()}
            watch = LinkWatch()
        try:
            assert {"lo", "up0", "up1"} <= set(links)
            assert links["up0"].running and links["up1"].running
            assert links["up1"].index == int(
                subprocess.run(["ip", "netns", "exec", ns, "cat", "/sys/class/net/up1/ifindex"],
                               capture_output=True, text=True, check=True).stdout
            )

            async def heard(cmd: list[str], name: str, running: bool) -> None:
                subprocess.run(cmd, check=True)
                while True:
                    for link in await asyncio.wait_for(watch.changes(), 10):
                        if link.name == name and link.running == running:
                            return

            # The far end going down takes our carrier away; our side stays administratively up.
            asyncio.run(heard(["ip", "-n", far, "link", "set", "dn1", "down"], "up1", False))
            asyncio.run(heard(["ip", "-n", far, "link", "set", "dn1", "up"], "up1", True))
        finally:
            watch.close()
