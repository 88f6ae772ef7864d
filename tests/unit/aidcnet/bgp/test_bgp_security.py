"""TCP-MD5 counters from /proc/net/netstat and the per-session problem they point to."""

from __future__ import annotations

import pytest

from aidcnet.bgp.security import md5_deltas, parse_netstat, session_problem

NETSTAT = (
    "TcpExt: SyncookiesSent TCPMD5NotFound TCPMD5Unexpected TCPMD5Failure TCPAckSkippedSynRecv\n"
    "TcpExt: 0 2 0 7 1\n"
    "IpExt: InNoRoutes InTruncatedPkts\n"
    "IpExt: 0 0\n"
)


def test_parse_netstat() -> None:
    c = parse_netstat(NETSTAT)
    assert c["TCPMD5Failure"] == 7 and c["TCPMD5NotFound"] == 2 and c["TCPAckSkippedSynRecv"] == 1
    assert parse_netstat(NETSTAT, "IpExt") == {"InNoRoutes": 0, "InTruncatedPkts": 0}
    assert parse_netstat("") == {}
    with pytest.raises(ValueError, match="TcpExt"):
        parse_netstat("TcpExt: A B\nTcpExt: 1\n")


def test_real_proc_file_parses() -> None:
    with open("/proc/net/netstat") as f:
        assert "TCPMD5Failure" in parse_netstat(f.read())


def test_problem_names_md5_only_when_down_and_grown() -> None:
    d = md5_deltas(parse_netstat(NETSTAT), {"TCPMD5Failure": 4})
    assert d == {"TCPMD5NotFound": 2, "TCPMD5Unexpected": 0, "TCPMD5Failure": 3}
    assert "mismatch" in session_problem("down (connection refused)", True, d)
    assert "TCPMD5Failure +3" in session_problem("idle", True, d)
    assert "no secret" in session_problem("idle", False, d)
    assert session_problem("up", True, d) is None
    assert session_problem("idle", True, dict.fromkeys(d, 0)) is None
