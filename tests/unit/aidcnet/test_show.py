"""`aidcnet ctl show bgp|bift` tables: every value of the agent's reply lands in its column."""

from __future__ import annotations

import json

import pytest

from aidcnet import cli
from aidcnet.show import format_bgp, format_bift, table

BGP = {
    "ok": True,
    "asn": 65001,
    "mode": "per-flow",
    "neighbors": [
        {
            "peer": "10.0.0.1",
            "name": "L1",
            "interface": "eth1",
            "asn": 65101,
            "link": "up",
            "bandwidth": "800G",
            "session": "up",
            "md5": True,
            "gtsm_hops": 1,
            "problem": None,
            "received": 7,
            "advertised": 1,
        },
        {
            "peer": "10.0.0.3",
            "name": "L2",
            "interface": "eth2",
            "asn": 65102,
            "link": "down",
            "bandwidth": "400G",
            "session": "idle",
            "md5": True,
            "gtsm_hops": 1,
            "problem": "TCP-MD5 secret mismatch suspected (TCPMD5Failure +4): both ends need the same secret",
            "received": 0,
            "advertised": 0,
        },
    ],
    "routes": {
        "10.255.0.9/32": {
            "nexthops": [
                {"via": "10.0.0.1", "dev": "eth1", "weight": 2},
                {"via": "10.0.0.3", "dev": "eth2", "weight": 1},
            ],
            "as_path": [65101, 65201],
            "advertised_bw": "1.2T",
        },
    },
    "events": [{"t_event": 1.0}],
    "counters": {"bgp.updates": 3, "bgp.errors": 0},
    "tcp_md5_counters": {"TCPMD5NotFound": 0, "TCPMD5Unexpected": 0, "TCPMD5Failure": 4},
}

BIFT = {
    "ok": True,
    "bfr_id": 3,
    "bift_mode": "static",
    "dataplane": "python",
    "dataplane_configured": "ebpf",
    "dataplane_error": "verifier said no",
    "imposition": "python",
    "imposition_error": None,
    "bgp_prefixes": None,
    "bgp_problems": None,
    "sub_domain": 0,
    "bsl": 256,
    "label_base": 100,
    "bift": {
        "1": [{"bfr_id": 300, "entries": [{"f_bm": "0x30", "bfr_nbr": "leaf2"}]}],
        "0": [
            {
                "bfr_id": 5,
                "entries": [{"f_bm": "0x30", "bfr_nbr": "spine1"}, {"f_bm": "0x30", "bfr_nbr": "spine2"}],
            }
        ],
    },
}


def test_table_aligns_columns():
    assert table(["a", "bb"], [["xxx", None]]).splitlines() == ["a    bb", "xxx  -"]


def test_bgp_summary_has_one_row_per_neighbour_and_the_routes():
    text = format_bgp(BGP)
    lines = text.splitlines()
    assert lines[0] == "BGP AS 65001, FARE mode per-flow: 1/2 sessions established, 1 routes selected"
    row = next(line for line in lines if line.startswith("10.0.0.3"))
    assert row.split() == ["10.0.0.3", "L2", "eth2", "65102", "down", "400G", "idle", "md5+gtsm1", "0", "0"]
    # The session that is down for a wrong secret is named, with why; the one that is up is not.
    assert "  10.0.0.3 (L2 via eth2): TCP-MD5 secret mismatch suspected (TCPMD5Failure +4)" in text
    assert not any(line.startswith("  10.0.0.1 (L1") for line in lines)
    assert "TCP-MD5 drops since the agent started: TCPMD5Failure 4" in lines
    route = next(line for line in lines if line.startswith("10.255.0.9/32"))
    assert "65101 65201" in route and "10.0.0.1 eth1 w2, 10.0.0.3 eth2 w1" in route and route.endswith("1.2T")
    assert "counters: bgp.updates=3" in text and "bgp.errors" not in text
    assert "1 recent link event(s)" in text


def test_bgp_routes_are_listed_in_address_order_not_as_text():
    route = BGP["routes"]["10.255.0.9/32"]
    prefixes = ["10.255.0.10/32", "10.255.0.2/32", "10.255.0.1/32", "10.255.0.0/24", "9.0.0.0/8"]
    text = format_bgp({**BGP, "routes": dict.fromkeys(prefixes, route)})
    listed = [line.split()[0] for line in text.splitlines() if line.startswith(("9.", "10.255."))]
    assert listed == ["9.0.0.0/8", "10.255.0.0/24", "10.255.0.1/32", "10.255.0.2/32", "10.255.0.10/32"]


def test_bift_table_per_si_in_order_with_every_alternative():
    lines = format_bift(BIFT).splitlines()
    assert lines[0] == (
        "BFR-id 3, sub-domain 0, BSL 256, label base 100, BIFT static, dataplane python (configured ebpf)"
    )
    assert "dataplane error: verifier said no" in lines
    assert lines.index("SI 0") < lines.index("SI 1")
    rows = [line.split() for line in lines if line.startswith("5 ")]
    assert rows == [["5", "0x30", "spine1"], ["5", "0x30", "spine2"]]
    assert "fast reroute" not in lines  # no bypasses: no section


def test_bift_lists_the_fast_reroute_bypasses_and_which_are_in_use():
    fast_reroute = {
        "bypass": {
            "spine2": {"via": "spine1", "labels": [55, 45]},
            "spine1": {"via": "spine2", "labels": [59, 44]},
        },
        "on": ["spine1"],
        "events": [],
        "first_copies": [],
    }
    lines = format_bift({**BIFT, "fast_reroute": fast_reroute}).splitlines()
    at = lines.index("fast reroute")
    assert lines[at + 1].split() == ["to", "BFR-NBR", "via", "labels", "pushed", "in", "use"]
    rows = [line.split() for line in lines[at + 2 :] if line.startswith("spine")]
    assert rows == [["spine1", "spine2", "59", "44", "on"], ["spine2", "spine1", "55", "45", "-"]]
    assert "fast reroute, node protection" not in lines


def test_bift_lists_the_next_next_hop_tunnels_of_node_protection():
    fast_reroute = {
        "bypass": {"r2": {"via": "r5", "labels": [45, 41, 38]}},
        "nnh_bypass": {"r2": [{"nnh": "r3", "via": "r5", "labels": [45, 41], "bfr_ids": [3, 8]}]},
        "on": ["r2"],
    }
    lines = format_bift({**BIFT, "fast_reroute": fast_reroute}).splitlines()
    at = lines.index("fast reroute, node protection")
    assert lines[at + 2].split() == ["r2", "r3", "r5", "45", "41", "3", "8", "on"]


@pytest.mark.parametrize(("what", "reply", "needle"), [("bgp", BGP, "Neighbor"), ("bift", BIFT, "SI 0")])
def test_ctl_show_prints_a_table_and_json_on_request(monkeypatch, capsys, what, reply, needle):
    import aidcnet.agent.client as client

    class FakeClient:
        def __init__(self, timeout: float) -> None:
            pass

        def call(self, op, **fields):
            assert op == what
            return reply

    monkeypatch.setattr(client, "AgentClient", FakeClient)
    assert cli.main(["ctl", "show", what]) == 0
    assert needle in capsys.readouterr().out
    assert cli.main(["ctl", "show", what, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == reply
