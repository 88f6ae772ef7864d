"""The agent's Prometheus collector, without HTTP: names, labels, values read at scrape time."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from aidcnet.agent.metrics import AgentCollector, interface_ipv4, sanitise, split_counter

COUNTERS = {
    "config.applied": 1,
    "control.health": 3,
    "bier.rx.packets": 10,
    "bier.tx.nbr.spine1.bytes": 1200,
    "bier.tx.nbr.spine2.bytes": 800,
    "bier.rx.src.10.0.0.9.packets": 2,
    "bier.if.eth1.tx_bytes": 2000,
    "bier.dropped-malformed": 5,
    "bier.dropped-malformed.short": 2,
    "bier.dropped-malformed.bad-version": 3,
    "bier.dropped-bits.no-entry": 4,
    "net-bier.port.eth2.rx-packets": 7,
    "bier.app-dropped": 0,
}


def scrape(source) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(AgentCollector(source, node="leaf1", role="bfr"))
    text = generate_latest(registry).decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def labels(**extra: str) -> frozenset[tuple[str, str]]:
    return frozenset({"node": "leaf1", "role": "bfr", **extra}.items())


def test_sanitise() -> None:
    assert sanitise("bier.dropped-ttl") == "aidcnet_bier_dropped_ttl"
    assert sanitise("net-bier..x") == "aidcnet_net_bier_x"


def test_split_counter_labels() -> None:
    assert split_counter("bier.tx.nbr.spine1.bytes") == ("aidcnet_bier_tx_nbr_bytes", {"neighbor": "spine1"})
    assert split_counter("bier.rx.src.10.0.0.9.packets") == (
        "aidcnet_bier_rx_src_packets",
        {"source": "10.0.0.9"},
    )
    assert split_counter("bier.if.eth1.rx_packets") == ("aidcnet_bier_if_rx_packets", {"interface": "eth1"})
    assert split_counter("bier.dropped-malformed.short") == (
        "aidcnet_bier_dropped_malformed_by_reason",
        {"reason": "short"},
    )
    assert split_counter("bier.dropped-malformed") == ("aidcnet_bier_dropped_malformed", {})


def test_exposition_names_labels_values() -> None:
    got = scrape(lambda: COUNTERS)
    assert got[("aidcnet_config_applied_total", labels())] == 1
    assert got[("aidcnet_bier_rx_packets_total", labels())] == 10
    assert got[("aidcnet_bier_tx_nbr_bytes_total", labels(neighbor="spine1"))] == 1200
    assert got[("aidcnet_bier_tx_nbr_bytes_total", labels(neighbor="spine2"))] == 800
    assert got[("aidcnet_bier_rx_src_packets_total", labels(source="10.0.0.9"))] == 2
    assert got[("aidcnet_bier_if_tx_bytes_total", labels(interface="eth1"))] == 2000
    assert got[("aidcnet_bier_dropped_malformed_total", labels())] == 5
    assert got[("aidcnet_bier_dropped_malformed_by_reason_total", labels(reason="bad-version"))] == 3
    assert got[("aidcnet_bier_dropped_bits_by_reason_total", labels(reason="no-entry"))] == 4
    assert got[("aidcnet_net_bier_port_rx_packets_total", labels(interface="eth2"))] == 7
    assert got[("aidcnet_bier_app_dropped_total", labels())] == 0
    assert got[("aidcnet_metrics_scrape_errors_total", labels())] == 0
    # every counter is exported exactly once (plus the collector's own error counter)
    assert len(got) == len(COUNTERS) + 1


def test_values_are_read_at_scrape_time() -> None:
    live = {"control.health": 1}
    source = lambda: live  # noqa: E731
    assert scrape(source)[("aidcnet_control_health_total", labels())] == 1
    live["control.health"] = 42
    live["config.applied"] = 2
    got = scrape(source)
    assert got[("aidcnet_control_health_total", labels())] == 42
    assert got[("aidcnet_config_applied_total", labels())] == 2


def test_non_numeric_values_skipped_and_source_errors_counted() -> None:
    got = scrape(lambda: {"a.b": "text", "c": True, "d": 1.5})
    assert ("aidcnet_a_b_total", labels()) not in got
    assert ("aidcnet_c_total", labels()) not in got
    assert got[("aidcnet_d_total", labels())] == 1.5

    def broken() -> dict[str, int]:
        raise TimeoutError("agent busy")

    registry = CollectorRegistry(auto_describe=False)
    collector = AgentCollector(broken, node="leaf1", role="bfr")
    registry.register(collector)
    generate_latest(registry)
    text = generate_latest(registry).decode()
    assert 'aidcnet_metrics_scrape_errors_total{node="leaf1",role="bfr"} 2.0' in text


def test_colliding_names_with_different_labels_stay_valid() -> None:
    # "bier.if.eth1.tx_bytes" takes an interface label; a flat counter sanitised to the same family
    # must not produce a family with two label sets.
    got = scrape(lambda: {"bier.if.eth1.tx_bytes": 1, "bier-if.tx_bytes": 9})
    assert got[("aidcnet_bier_if_tx_bytes_total", labels(interface="eth1"))] == 1
    assert got[("aidcnet_bier_if_tx_bytes_flat_total", labels())] == 9


def test_interface_ipv4() -> None:
    assert interface_ipv4("lo") == "127.0.0.1"
    assert interface_ipv4("no-such-if0") is None


def test_ina_drop_reasons_become_a_labelled_family():
    assert split_counter("ina.dropped.slot-budget-exceeded") == (
        "aidcnet_ina_dropped_by_reason", {"reason": "slot-budget-exceeded"}
    )
    assert split_counter("ina.completed") == ("aidcnet_ina_completed", {})


def test_the_exporter_waits_for_eth0_to_get_its_address(monkeypatch) -> None:
    """A lab's own management hub gives eth0 its address after the agent started: the agent keeps
    looking, and exports once the address is there, on that address."""
    import asyncio
    from types import SimpleNamespace

    from aidcnet.agent import metrics

    answers = iter([None, None, "10.9.0.2"])
    looked: list[str] = []
    started: list[tuple[str, int]] = []

    def fake_ipv4(ifname: str) -> str | None:
        looked.append(ifname)
        return next(answers)

    monkeypatch.setattr(metrics, "interface_ipv4", fake_ipv4)
    monkeypatch.setattr(metrics, "EXPORTER_RETRY_S", 0.01)
    monkeypatch.setattr(metrics, "start_exporter", lambda c, address, port: started.append((address, port)))

    async def run() -> None:
        metrics.serve_agent(SimpleNamespace(role="bfr"), port=19464)  # type: ignore[arg-type]
        assert started == []
        await asyncio.sleep(0.2)

    asyncio.run(run())
    assert looked == ["eth0"] * 3
    assert started == [("10.9.0.2", 19464)]
