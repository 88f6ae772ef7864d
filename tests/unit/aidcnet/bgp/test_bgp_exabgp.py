"""ExaBGP glue: JSON messages as ExaBGP 5.0.15 prints them (captured from real sessions), config text,
commands; and ExaBGP's own parser accepting the config we generate."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest

from aidcnet.bgp.exabgp import Neighbor, announce_command, config_text, parse_message, withdraw_command
from aidcnet.bgp.rib import Announcement, RawAttribute

HEAD = '{ "exabgp": "5.0.0", "time": 1795675138.24, "host" : "vm", "pid" : 12638, "ppid" : 1, "counter": 11, '
NEIGHBOR = (
    '"neighbor": { "address": { "local": "127.0.0.2", "peer": "127.0.0.1" }, '
    '"asn": { "local": 65002, "peer": 65001 }, "router-id": "2.2.2.2" , '
)
# Captured: a transitive link-bandwidth community (AS 65001, 400G) ExaBGP does not decode ("string": "").
UPDATE = (
    HEAD + '"type": "update", ' + NEIGHBOR + '"direction": "receive", "message": { "update": { "attribute": '
    '{ "origin": "igp", "as-path": {"0": {"element": "as-sequence", "value": [65002, 4200000001]}}, '
    '"extended-community": [ { "value": 562954248388609, "string": "target:1:1" }, '
    '{ "value": 1405078438822839, "string": "" } ], "attribute-0x29-0xE0": "0x0001000c" }, '
    '"announce": { "ipv4 unicast": { "127.0.0.1": [ { "nlri": "10.9.9.2/32" }, '
    '{ "nlri": "10.9.9.3/32" } ] } } } } } }'
)
WITHDRAW = (
    HEAD + '"type": "update", ' + NEIGHBOR + '"direction": "receive", "message": { "update": { '
    '"withdraw": { "ipv4 unicast": [ { "nlri": "10.9.9.2/32" } ] } } } } }'
)
EOR = (
    HEAD
    + '"type": "update", '
    + NEIGHBOR
    + '"direction": "receive", "message": { "eor": { "afi" : "ipv4" } } } }'
)
DOWN = HEAD + '"type": "state", ' + NEIGHBOR + '"state": "down", "reason": "closing connection" } }'
UP = HEAD + '"type": "state", ' + NEIGHBOR + '"state": "up" } }'


def test_update_with_transitive_link_bandwidth_and_unknown_attribute() -> None:
    event = parse_message(UPDATE)
    assert event.kind == "update" and event.peer == "127.0.0.1"
    assert [p.prefix for p in event.announced] == ["10.9.9.2/32", "10.9.9.3/32"]
    path = event.announced[0]
    assert path.as_path == (65002, 4200000001)
    assert path.link_bw == 49999998976.0  # 0x0004FDE9513A43B7: the float32 nearest 5e10 bytes/s
    assert path.attributes == (RawAttribute(41, 0xE0, "0001000c"),)


def test_withdraw_eor_and_states() -> None:
    assert parse_message(WITHDRAW).withdrawn == ("10.9.9.2/32",)
    assert parse_message(EOR).kind == "ignore"
    down = parse_message(DOWN)
    assert down.kind == "down" and down.reason == "closing connection"
    assert parse_message(UP).kind == "up"


def test_malformed_link_bandwidth_is_an_error_not_skipped() -> None:
    bad = json.loads(UPDATE)
    # type 0x00/sub-type 0x04 with a NaN bandwidth
    bad["neighbor"]["message"]["update"]["attribute"]["extended-community"] = [{"value": 0x0004FDE97FC00000}]
    with pytest.raises(ValueError, match="bandwidth"):
        parse_message(json.dumps(bad))


@pytest.mark.parametrize("line", ["not json", "[1, 2]"])
def test_garbage_raises_value_error(line: str) -> None:
    with pytest.raises(ValueError):
        parse_message(line)


def test_commands() -> None:
    text = Announcement("10.255.0.5/32", (4200000000,), 1e11).text(23456, transitive=True)
    assert announce_command("10.0.0.1", text) == (
        "neighbor 10.0.0.1 announce route 10.255.0.5/32 next-hop self as-path [ 4200000000 ] "
        "extended-community [ 0x00045BA051BA43B7 ]"
    )
    assert (
        withdraw_command("10.0.0.1", "10.255.0.5/32")
        == "neighbor 10.0.0.1 withdraw route 10.255.0.5/32 next-hop self"
    )


def _validate(path) -> subprocess.CompletedProcess:
    # ExaBGP is a node dependency (pyproject), installed on the host too: its own validator is the judge.
    return subprocess.run(
        [sys.executable, "-m", "exabgp", "validate", str(path)], capture_output=True, text=True, timeout=60
    )


def test_exabgp_accepts_the_generated_config(tmp_path) -> None:
    conf = tmp_path / "exabgp.conf"
    neighbors = [
        Neighbor("10.0.0.1", "10.0.0.0", 4200000000, 65100, "10.255.0.5"),
        Neighbor("10.0.0.3", "10.0.0.2", 4200000000, 65101, "10.255.0.5", hold_time=3),
    ]
    text = config_text(neighbors, "/bin/cat")
    conf.write_text(text)
    result = _validate(conf)
    assert result.returncode == 0, result.stdout + result.stderr
    # The validator can fail: a typo in one keyword is rejected.
    conf.write_text(text.replace("hold-time 3;", "hold-tim 3;"))
    assert _validate(conf).returncode != 0


SECRET = "s3cr3t-Key!"


def test_md5_and_gtsm_rendered_per_neighbor() -> None:
    n = Neighbor("10.0.0.1", "10.0.0.0", 65000, 65100, "10.255.0.5", md5_password=SECRET, ttl_security_hops=1)
    text = config_text([n], "/bin/cat")
    assert f'    md5-password "{SECRET}";' in text.splitlines()
    # RFC 5082 §3, one hop: send 255, accept >= 255
    assert "    outgoing-ttl 255;" in text.splitlines()
    assert "    incoming-ttl 255;" in text.splitlines()
    assert SECRET not in repr(n)
    plain = config_text([Neighbor("10.0.0.1", "10.0.0.0", 65000, 65100, "10.255.0.5")], "/bin/cat")
    assert "md5" not in plain and "ttl" not in plain
    two = config_text([Neighbor("10.0.0.1", "10.0.0.0", 1, 2, "1.1.1.1", ttl_security_hops=2)], "/bin/cat")
    assert "    incoming-ttl 254;" in two.splitlines()


@pytest.mark.parametrize("bad", ["", "has space", 'q"uote', "semi;colon", "x" * 81, "br{ace"])
def test_unsafe_md5_secret_rejected_without_echo(bad: str) -> None:
    n = Neighbor("10.0.0.1", "10.0.0.0", 65000, 65100, "10.255.0.5", md5_password=bad)
    with pytest.raises(ValueError, match=r"10\.0\.0\.1") as err:
        config_text([n], "/bin/cat")
    assert not bad or bad not in str(err.value)


def test_exabgp_accepts_md5_and_gtsm(tmp_path) -> None:
    conf = tmp_path / "exabgp.conf"
    n = Neighbor("10.0.0.1", "10.0.0.0", 65000, 65100, "10.255.0.5", md5_password=SECRET, ttl_security_hops=1)
    text = config_text([n], "/bin/cat")
    conf.write_text(text)
    result = _validate(conf)
    assert result.returncode == 0, result.stdout + result.stderr
    conf.write_text(text.replace("incoming-ttl 255;", "incoming-ttl x;"))
    assert _validate(conf).returncode != 0


def test_a_passive_end_listens_and_never_connects(tmp_path) -> None:
    n = Neighbor("10.0.0.1", "10.0.0.0", 65000, 65100, "10.255.0.5")
    active = config_text([n], "/bin/cat").splitlines()
    passive = config_text([dataclasses.replace(n, passive=True)], "/bin/cat").splitlines()
    assert {"    listen 179;", "    connect 179;"} <= set(active) and "    passive true;" not in active
    assert {"    listen 179;", "    passive true;"} <= set(passive) and "    connect 179;" not in passive
    conf = tmp_path / "exabgp.conf"
    conf.write_text("\n".join(passive) + "\n")
    result = _validate(conf)
    assert result.returncode == 0, result.stdout + result.stderr
