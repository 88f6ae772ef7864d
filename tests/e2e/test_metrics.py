"""Prometheus metrics of a running leaf-spine: scraped from the host over the management network, a
BIER counter grows with traffic, and the endpoint is not reachable from the data plane."""

from __future__ import annotations

import ipaddress
import json
import time
import urllib.request
from pathlib import Path

import yaml
from prometheus_client.parser import text_string_to_metric_families

from aidcnet.agent.metrics import METRICS_PORT
from orchestrator.lab.deploy import mgmt_addresses
from orchestrator.lab.runtime.docker import DockerRuntime
from tests.e2e.conftest import deployed

LAB = "pm-metrics"


def scrape(address: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    with urllib.request.urlopen(f"http://{address}:{METRICS_PORT}/metrics", timeout=5) as reply:
        assert reply.status == 200
        text = reply.read().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: dict, name: str, **labels: str) -> float:
    wanted = set(labels.items())
    hits = [v for (n, ls), v in samples.items() if n == name and wanted <= ls]
    assert len(hits) == 1, f"{name}{labels}: {len(hits)} samples"
    return hits[0]


def test_metrics_scraped_over_mgmt_and_grow_with_traffic(runtime: DockerRuntime, tmp_path: Path) -> None:
    with deployed(runtime, tmp_path, "leaf-spine", LAB, configured=True) as topo:
        mgmt = mgmt_addresses(runtime, topo)
        plan = yaml.safe_load((Path.cwd() / topo.lab_dir_name / "plan.yml").read_text())["nodes"]
        leaf1 = mgmt["leaf1"]
        # The lab's own management network, with the subnet deploy chose for it.
        assert ipaddress.ip_address(leaf1) in ipaddress.ip_network(str(topo.mgmt.ipv4_subnet)), mgmt

        before = scrape(leaf1)
        rx_before = value(before, "aidcnet_bier_rx_packets_total", node="leaf1", role="bfr")
        assert value(before, "aidcnet_config_applied_total", node="leaf1") >= 1
        # Per-neighbour counters are one family with a neighbor label, not one name per neighbour.
        neighbours = {
            dict(ls)["neighbor"] for (n, ls) in before if n == "aidcnet_bier_tx_nbr_bytes_total"
        }
        assert {"spine1", "spine2"} <= neighbours, neighbours

        # h1 (under leaf1) to h5 (under leaf3): every packet enters leaf1's BIER dataplane.
        count = 20
        code, out = runtime.exec(
            topo.container_name("h1"),
            ["aidcnet", "ctl", "bier", "send", "--to", str(plan["h5"]["bfr_id"]), "--count", str(count)],
        )
        assert code == 0, out
        assert json.loads(out)["messages"] == count
        deadline = time.monotonic() + 10
        while True:
            rx_after = value(scrape(leaf1), "aidcnet_bier_rx_packets_total", node="leaf1", role="bfr")
            if rx_after >= rx_before + count or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert rx_after >= rx_before + count, (rx_before, rx_after)

        # Bound to eth0 only: leaf1's loopback, reachable from h1 over the fabric, has no exporter.
        probe = (
            "import socket,sys\n"
            "s=socket.socket();s.settimeout(2)\n"
            "sys.exit(s.connect_ex((sys.argv[1],int(sys.argv[2]))))\n"
        )
        loopback = plan["leaf1"]["loopback"].split("/")[0]
        code, out = runtime.exec(
            topo.container_name("h1"), ["python3", "-c", probe, loopback, str(METRICS_PORT)]
        )
        assert code != 0, f"metrics answered on leaf1's fabric loopback {loopback}: {out}"
