"""Runs remember their link conditions: link set records them in fabric.json, a run copies them into
settings.conditions, and the report labels each run and flags a comparison across different conditions."""

from __future__ import annotations

from orchestrator.experiment.metrics import compare_runs
from orchestrator.experiment.report.blocks import Para
from orchestrator.experiment.report.document import conditions_heading, group_blocks, groups_of
from orchestrator.experiment.report.sections.summary import summary_table
from orchestrator.lab import shaping
from orchestrator.lab.fabric import Fabric, conditions_label
from orchestrator.lab.linkset import link_set
from tests.unit.orchestrator.experiment import results_fixtures as fx
from tests.unit.orchestrator.lab.test_linkset import FakeFabricIO, FakeRuntime, lab_dir_with_fabric


def test_link_set_records_loss_down_and_bandwidth_in_fabric_json(tmp_path):
    lab_dir = lab_dir_with_fabric(tmp_path)
    assert shaping.load_fabric(lab_dir).conditions() == {
        "scale": 10000,
        "loss": {},
        "down": [],
        "bandwidth_bps": {},
    }
    rt = FakeRuntime()
    link_set(rt, lab_dir, "F1:eth1", "loss", "0.02", fabric_io=FakeFabricIO())
    link_set(rt, lab_dir, "L1:eth1", "down", fabric_io=FakeFabricIO())
    link_set(rt, lab_dir, "G1:eth1", "bandwidth", "400G", fabric_io=FakeFabricIO())
    got = shaping.load_fabric(lab_dir).conditions()
    assert got["scale"] == 10000 and got["down"] == ["L1:eth1"]
    assert got["loss"] == {"F1:eth1": 0.02, "G1:eth2": 0.02}  # loss is set at both ends
    assert got["bandwidth_bps"] == {"G1:eth1": 400_000_000_000}
    # The label a report shows, and after up/loss 0 the link is clean again.
    assert conditions_label(got) == (
        "1:10000, loss 2.00% F1:eth1, loss 2.00% G1:eth2, L1:eth1 down, G1:eth1 400G"
    )
    link_set(rt, lab_dir, "L1:eth1", "up", fabric_io=FakeFabricIO())
    link_set(rt, lab_dir, "F1:eth1", "loss", "0", fabric_io=FakeFabricIO())
    again = shaping.load_fabric(lab_dir).conditions()
    assert again["down"] == [] and again["loss"] == {}


def test_fabric_json_without_the_new_keys_still_reads(tmp_path):
    fabric = Fabric("x", None, {})
    text = fabric.to_json().replace('"down": [],', "").replace(',\n  "bandwidth_set": {}', "")
    assert "down" not in text
    assert Fabric.from_json(text).conditions() == {"scale": None, "loss": {}, "down": [], "bandwidth_bps": {}}


def test_conditions_label_words():
    assert conditions_label(None) == "not recorded"
    assert conditions_label({"scale": None, "loss": {}, "down": [], "bandwidth_bps": {}}) == "unshaped, clean"
    assert conditions_label({"scale": 20000, "loss": {"s5:eth1": 0.02}}) == "1:20000, loss 2.00% s5:eth1"


def _with(run, conditions):
    meta = run.meta.model_copy(update={"settings": {"conditions": conditions}})
    return run.model_copy(update={"meta": meta})


CLEAN = {"scale": 20000, "loss": {}, "down": [], "bandwidth_bps": {}}
LOSSY = {**CLEAN, "loss": {"s5:eth1": 0.02}}


def test_runs_under_other_conditions_are_never_columns_of_one_comparison():
    """The issue's case: a lossy run beside a clean one was compared with it ("1.04x slower")."""
    runs = [_with(fx.run("host-bier"), LOSSY), _with(fx.run("unicast"), CLEAN)]
    clean, lossy = compare_runs(runs)
    assert (clean.labels, lossy.labels) == (["unicast"], ["host-bier"])
    assert lossy.ratios == [] and lossy.baseline is None
    assert summary_table(clean).row("link conditions") == ["1:20000, clean"]
    assert summary_table(lossy).row("link conditions") == ["1:20000, loss 2.00% s5:eth1"]


def test_the_headings_name_the_conditions_and_what_differs():
    runs = [
        _with(fx.run("host-bier"), LOSSY),
        _with(fx.run("unicast"), CLEAN),
        _with(fx.run("host-bier"), CLEAN),
    ]
    clean, lossy = groups_of(runs)
    assert conditions_heading(clean) == f"{clean.comparison.lab} / {clean.comparison.trace}: shaped, clean"
    assert conditions_heading(lossy).endswith(": shaped, loss 2.00% s5:eth1")
    (apart,) = [b.text for b in group_blocks(lossy) if isinstance(b, Para) and b.text.startswith("Under ")]
    assert "shaped, clean (unicast, host-bier: loss on s5:eth1 none there, 2.00% here)" in apart
    text = " ".join(b.text for b in group_blocks(lossy) if isinstance(b, Para))
    assert "No unicast run under these conditions" in text and "shaped, clean" in text


def test_same_conditions_keep_a_plain_heading():
    runs = [_with(fx.run("host-bier"), LOSSY), _with(fx.run("unicast"), LOSSY)]
    (group,) = groups_of(runs)
    assert conditions_heading(group) == f"{group.comparison.lab} / {group.comparison.trace}"
    assert not any(isinstance(b, Para) and b.text.startswith("Under ") for b in group_blocks(group))
