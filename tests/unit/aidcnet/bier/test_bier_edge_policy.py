"""RFC 8296 §6 edge policy: host ports accept only plan BFIRs with their own BFR-id and an allowed
BitString; fabric ports only neighboring BFRs."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aidcnet.bier.bitstring import bitstrings_from_ids, ids_from_bitstring
from aidcnet.bier.edge_policy import (
    FABRIC,
    HOST,
    POLICY_REASONS,
    HostBfir,
    PortPolicy,
    check,
    from_config,
)

BSL = 64
HOST_A = "10.0.1.2"


def host_port(allowed: list[int] | None = None, bfr_id: int = 3) -> PortPolicy:
    return PortPolicy(HOST, hosts={HOST_A: HostBfir.reaching(bfr_id, allowed, BSL)})


def test_no_policy_accepts_everything() -> None:
    assert check(None, "192.0.2.9", 0, 0xFF, 77) is None


def test_legitimate_host_accepted() -> None:
    assert check(host_port([1, 2, 5]), HOST_A, 0, 0b10011, 3) is None


def test_unknown_host_is_not_bfir() -> None:
    assert check(host_port(), "10.0.1.99", 0, 1, 3) == "not-bfir"


def test_forged_bfir_id() -> None:
    assert check(host_port(), HOST_A, 0, 1, 4) == "forged-bfir-id"


def test_bitstring_outside_set() -> None:
    assert check(host_port([1, 2]), HOST_A, 0, 0b100, 3) == "bitstring-outside-set"
    # an SI the host may not reach at all (BFR-id 65 is SI 1 bit 1 at BSL 64)
    assert check(host_port([1, 2]), HOST_A, 1, 0b1, 3) == "bitstring-outside-set"


def test_whole_domain_by_default() -> None:
    assert check(host_port(None), HOST_A, 3, (1 << 64) - 1, 3) is None


def test_fabric_port() -> None:
    p = PortPolicy(FABRIC, neighbors=frozenset({"10.1.0.1"}))
    assert check(p, "10.1.0.1", 0, 1, 9) is None
    assert check(p, "10.1.0.7", 0, 1, 9) == "not-bfr-neighbor"
    # a host address on a fabric port is no BFR neighbor, whatever it claims
    assert check(p, HOST_A, 0, 1, 3) == "not-bfr-neighbor"


def test_from_config() -> None:
    pols = from_config(
        {
            "eth1": {"kind": "host", "hosts": {HOST_A: {"bfr_id": 3, "allowed": [1, 2, 65]}}},
            "eth2": {"kind": "fabric", "neighbors": ["10.1.0.1"]},
        },
        BSL,
    )
    assert pols["eth1"].hosts[HOST_A] == HostBfir(3, {0: 0b11, 1: 0b1})
    assert pols["eth2"].neighbors == frozenset({"10.1.0.1"})


@pytest.mark.parametrize(
    "spec, field",
    [
        ({"kind": "edge"}, "eth1.kind"),
        ({"kind": "host", "hosts": {HOST_A: {"bfr_id": 0}}}, f"eth1.hosts.{HOST_A}.bfr_id"),
        ({"kind": "fabric", "neighbors": "10.1.0.1"}, "eth1.neighbors"),
    ],
)
def test_from_config_errors_name_the_field(spec: dict, field: str) -> None:
    with pytest.raises(ValueError, match=field.replace(".", r"\.")):
        from_config({"eth1": spec}, BSL)


ids = st.integers(min_value=1, max_value=4 * BSL)


@given(
    allowed=st.frozensets(ids, max_size=20),
    sent=st.frozensets(ids, min_size=1, max_size=20),
    bfir=st.integers(min_value=1, max_value=300),
)
def test_accepts_exactly_allowed_subsets(allowed: frozenset[int], sent: frozenset[int], bfir: int) -> None:
    """Per SI, a packet passes iff it is from the host's own BFR-id and every BFER it addresses is allowed."""
    p = host_port(sorted(allowed), bfr_id=3)
    for si, bits in bitstrings_from_ids(sent, BSL).items():
        verdict = check(p, HOST_A, si, bits, bfir)
        if bfir != 3:
            assert verdict == "forged-bfir-id"
        elif set(ids_from_bitstring(si, bits, BSL)) <= allowed:
            assert verdict is None
        else:
            assert verdict == "bitstring-outside-set"
        assert verdict is None or verdict in POLICY_REASONS


def test_node_file_section_reaches_the_dataplane_form() -> None:
    from aidcnet.agent.bier.service import edge_policies
    from aidcnet.config import Bier
    from tests.unit.node_files import bier_knobs

    bier = Bier.model_validate(
        {
            "bfr_id": 2,
            **bier_knobs(bsl=64),
            "edge_policy": {
                "eth1": {"kind": "host", "hosts": {HOST_A: {"bfr_id": 3, "allowed": [1]}}},
                "eth2": {"kind": "fabric", "neighbors": ["10.1.0.1"]},
            },
        }
    )
    policies = edge_policies(bier)
    assert set(policies) == {"eth1", "eth2"}
    assert check(policies["eth1"], HOST_A, 0, 0b1, 3) is None
    assert check(policies["eth1"], HOST_A, 0, 0b10, 3) == "bitstring-outside-set"
    assert check(policies["eth2"], "10.1.0.0", 0, 1, 3) == "not-bfr-neighbor"


def test_ebpf_fast_path_starts_with_the_policy_on_its_dataplane(monkeypatch) -> None:
    """The tc program enforces the policy too (EbpfBier.write_policy reads BierDataplane.edge_policies), so
    a BFR with dataplane: ebpf and a policy starts its fast path, the policy installed before it starts."""
    import functools

    import aidcnet.agent.bier.dataplane as dataplane
    import aidcnet.agent.bier.service as svc
    from aidcnet.agent.bier.dataplane import BierDataplane
    from tests.unit.aidcnet.bgp.test_bier_bgp import leaf_spine

    monkeypatch.setattr(svc, "BierDataplane", functools.partial(BierDataplane, bind_addr="127.0.0.1", port=0))
    # the node's interfaces are not on this machine: any index will do, the policy is what is looked at
    monkeypatch.setattr(dataplane, "interface_index", lambda _sock, ifname: 100 + len(ifname))
    seen = []
    monkeypatch.setattr(
        svc, "start_fast_path", lambda dp, **_: seen.append(dict(dp.edge_policies)) or (object(), None)
    )
    spine1 = leaf_spine("static")["spine1"].bier
    assert spine1.dataplane == "ebpf"
    nbr = spine1.neighbors[0]
    policy = {nbr.interface: {"kind": "fabric", "neighbors": [str(nbr.address)]}}
    guarded = spine1.model_copy(update={"edge_policy": port_policies(policy)})
    service = svc.BierService(guarded, host=False)
    try:
        assert service.ebpf_error is None and len(seen) == 1
        assert seen[0][nbr.interface].kind == "fabric"
        assert seen[0][nbr.interface].neighbors == frozenset({str(nbr.address)})
        assert f"dropped-policy.{nbr.interface}.not-bfr-neighbor" in service.dataplane.counters()
    finally:
        service.ebpf = None
        service.close()
    # without a policy (the vars' edge_policy: false): nothing installed
    plain = svc.BierService(spine1.model_copy(update={"edge_policy": {}}), host=False)
    try:
        assert len(seen) == 2 and seen[1] == {} and plain.ebpf_error is None
    finally:
        plain.ebpf = None
        plain.close()


def port_policies(spec: dict) -> dict:
    from aidcnet.config import BierPortPolicy

    return {k: BierPortPolicy.model_validate(v) for k, v in spec.items()}


def test_reason_codes_are_the_ebpf_programs() -> None:
    """bier.h's enum bier_pol_reason lists the reasons in REASON_CODE's order, POL_OK first: the eBPF
    counters are read back under the pure module's names by code."""
    from pathlib import Path

    from aidcnet.bier.edge_policy import POLICY_REASONS, REASON_CODE

    header = (Path(__file__).parents[4] / "aidcnet/ebpf/bier.h").read_text()
    enum = header.split("enum bier_pol_reason {", 1)[1].split("};", 1)[0]
    names = [ln.strip().rstrip(",") for ln in enum.splitlines() if ln.strip().startswith("POL_")]
    assert names == ["POL_OK", *("POL_" + r.upper().replace("-", "_") for r in POLICY_REASONS)]
    assert sorted(REASON_CODE.values()) == list(range(1, len(POLICY_REASONS) + 1))
    assert f"#define BIER_POL_NREASONS {len(POLICY_REASONS) + 1}" in header
