"""orchestrator.experiment.report and the report command: files, tables, plots, determinism, terminal
output."""

from __future__ import annotations

import argparse
import io
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from rich.console import Console

from orchestrator.cli.report import add_parser, main, resolve_specs
from orchestrator.experiment.metrics import compare_runs
from orchestrator.experiment.records import RunResult
from orchestrator.experiment.report import plots, print_summary, write_report
from orchestrator.experiment.report.plots import layered_layout
from orchestrator.experiment.results import new_run_id, save_run
from tests.unit.orchestrator.experiment import results_fixtures as fx

PNG = b"\x89PNG\r\n\x1a\n"
MODES = ["unicast", "host-bier", "net-bier"]


def three_modes() -> list[RunResult]:
    topo = fx.topology()
    return [fx.run(m, topo) for m in reversed(MODES)]


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    out = tmp_path_factory.mktemp("report")
    return write_report(three_modes(), fx.topology(), out)


def _stub_plots(monkeypatch: pytest.MonkeyPatch) -> None:
    """For tests about text: skip matplotlib, but still hand back a file like the real plots do."""

    def fake(*args: object) -> Path:
        path = args[-1]
        assert isinstance(path, Path)
        path.write_bytes(PNG + path.name.encode())
        return path

    for name in ("plot_heatmap", "plot_egress", "plot_latency_cdf"):
        monkeypatch.setattr(plots, name, fake)


# ---------------------------------------------------------------------------------------------- files


def test_report_files_exist_and_pngs_are_real(rendered: tuple[Path, Path]) -> None:
    md, html = rendered
    assert md.name == "report.md" and html.name == "report.html"
    assert md.stat().st_size > 0 and html.stat().st_size > 0
    pngs = sorted(md.parent.glob("*.png"))
    assert [p.name for p in pngs] == [
        "g1-leaf-spine-egress.png",
        "g1-leaf-spine-heatmap.png",
        "g1-leaf-spine-latency.png",
    ]
    for p in pngs:
        data = p.read_bytes()
        assert data.startswith(PNG) and len(data) > 5000
    # Markdown links every PNG by a relative path that resolves.
    linked = re.findall(r"!\[[^]]*\]\(([^)]+)\)", md.read_text())
    assert sorted(linked) == [p.name for p in pngs]


def test_html_is_self_contained(rendered: tuple[Path, Path]) -> None:
    _md, html = rendered
    text = html.read_text()
    assert text.count('src="data:image/png;base64,') == 3
    assert not re.search(r'src="(?!data:)', text)
    assert "<link" not in text and "<script" not in text
    assert "<table>" in text and "net-bier" in text


def test_markdown_summary_has_every_mode_and_the_ratios(rendered: tuple[Path, Path]) -> None:
    text = rendered[0].read_text()
    header = next(line for line in text.splitlines() if line.startswith("| metric |"))
    assert header == "| metric | unicast | host-bier | net-bier |"
    for row in (
        "delivered / expected",
        "source egress",
        "total fabric bytes",
        "most-loaded link",
        "completion",
        "completion (wall)",
        "time scale",
        "fidelity",
        "bottleneck bound",
        "latency p50",
        "latency p99",
    ):
        assert re.search(rf"^\| {re.escape(row)} \|", text, re.M), row
    assert "| source egress | 35.2 KiB | 11.7 KiB | 11.7 KiB |" in text
    assert "| source egress ÷ | 3.00× | 3.00× |" in text
    assert "| egress ÷ / fan-out | 100.0% | 100.0% |" in text
    assert "| bandwidth saved | 33.3% | 33.3% |" in text
    assert "net-bier: the sources sent 11.7 KiB, 3.00× less than unicast (35.2 KiB)" in text
    assert "`h1:eth1<->leaf1:eth3`" in text
    # The fixture's runs are unshaped: their times are the emulator's and the report says so.
    assert "| fidelity | not judged (unshaped) |" in text
    assert "net-bier against unicast: completion times not compared: " in text


def test_html_has_the_same_tables_as_markdown(rendered: tuple[Path, Path]) -> None:
    md, html = rendered
    md_rows = [line for line in md.read_text().splitlines() if line.startswith("| ") and "---" not in line]
    html_rows = re.findall(r"<tr>(.*?)</tr>", html.read_text())
    assert len(md_rows) == len(html_rows)
    assert "<td>source egress ÷</td><td>3.00×</td><td>3.00×</td>" in html.read_text()


def test_identical_input_gives_identical_files(tmp_path: Path, rendered: tuple[Path, Path]) -> None:
    md, html = write_report(three_modes(), fx.topology(), tmp_path)
    assert md.read_bytes() == rendered[0].read_bytes()
    assert html.read_bytes() == rendered[1].read_bytes()
    for png in tmp_path.glob("*.png"):
        assert png.read_bytes() == (rendered[0].parent / png.name).read_bytes(), png.name


def test_generated_at_is_printed_only_when_given(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _stub_plots(monkeypatch)
    at = datetime(2025, 3, 14, 11, 0, tzinfo=UTC)
    md, _ = write_report(three_modes(), None, tmp_path / "a", generated_at=at, title="Leaf-spine MoE")
    text = md.read_text()
    assert text.startswith("# Leaf-spine MoE\n")
    assert "generated 2025-03-14T11:00:00+00:00" in text
    md2, _ = write_report(three_modes(), None, tmp_path / "b")
    assert "generated" not in md2.read_text()


def test_groups_without_unicast_and_several_groups(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _stub_plots(monkeypatch)
    topo = fx.topology()
    other = fx.trace_info(sha256="cd" * 32, file="other.jsonl")
    runs = [
        fx.run("unicast", topo),
        fx.run("net-bier", topo),
        fx.run("net-bier", topo, run_id="x", trace=other),
    ]
    md, html = write_report(runs, topo, tmp_path)
    text = md.read_text()
    assert "## leaf-spine / fanout3.jsonl" in text and "## leaf-spine / other.jsonl" in text
    assert text.index("fanout3.jsonl") < text.index("other.jsonl")
    assert text.count("No unicast run in this group") == 1
    assert sorted(p.name for p in tmp_path.glob("*.png"))[:3] == [
        "g1-leaf-spine-egress.png",
        "g1-leaf-spine-heatmap.png",
        "g1-leaf-spine-latency.png",
    ]
    assert len(list(tmp_path.glob("g2-*.png"))) == 3
    assert html.read_text().count("data:image/png;base64,") == 6


def test_integrity_problems_show_in_the_summary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _stub_plots(monkeypatch)
    run = fx.run("net-bier")
    bad = run.messages[0].model_copy(
        update={"delivered": ["h3", "h8"], "latency": {"h3": 0.001}, "duplicates": {"h3": 1}}
    )
    run = run.model_copy(update={"messages": [bad, *run.messages[1:]]})
    md, _ = write_report([fx.run("unicast"), run], None, tmp_path)
    text = md.read_text()
    assert "| delivered / expected | 12/12 (100.0%) | 10/12 (83.3%) |" in text
    assert "| integrity | ok | 2 missing, 1 wrong receiver(s), 1 duplicate(s) |" in text


def test_no_runs_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no runs to report"):
        write_report([], None, tmp_path)


# ---------------------------------------------------------------------------------------- layout and plots


def test_layered_layout_puts_tiers_in_rows_and_leaves_over_their_hosts() -> None:
    (c,) = compare_runs(three_modes())
    g = plots.fabric_graph(c, fx.topology())
    pos = layered_layout(g, set(fx.HOSTS))
    assert {pos[h][1] for h in fx.HOSTS} == {0.0}
    assert {pos[f"leaf{i}"][1] for i in range(1, 5)} == {1.0}
    assert {pos["spine1"][1], pos["spine2"][1]} == {2.0}
    assert [n for n, _ in sorted(pos.items(), key=lambda kv: kv[1]) if n.startswith("h")] == fx.HOSTS
    assert pos["h1"][0] < pos["leaf1"][0] < pos["h2"][0]
    assert pos["spine1"][0] < pos["spine2"][0]


def test_layout_falls_back_to_seeded_spring_without_hosts() -> None:
    (c,) = compare_runs(three_modes())
    g = plots.fabric_graph(c, None)
    a = layered_layout(g, set())
    b = layered_layout(g, {"not-in-graph"})
    assert a == b
    assert set(a) == set(g)
    assert len({round(y, 6) for _, y in a.values()}) > 3  # not rows


def test_heatmap_without_topology_uses_the_link_ids(tmp_path: Path) -> None:
    (c,) = compare_runs(three_modes())
    path = plots.plot_heatmap(c, None, tmp_path / "h.png")
    assert path.read_bytes().startswith(PNG)
    assert set(plots.fabric_graph(c, None)) == set(fx.topology().nodes)


def test_latency_plot_without_deliveries(tmp_path: Path) -> None:
    run = fx.run("unicast").model_copy(update={"messages": []})
    (c,) = compare_runs([run])
    assert plots.plot_latency_cdf(c, tmp_path / "l.png").read_bytes().startswith(PNG)


def test_byte_unit() -> None:
    assert plots.byte_unit(0) == (1, "B")
    assert plots.byte_unit(1023) == (1, "B")
    assert plots.byte_unit(1024) == (1024, "KiB")
    assert plots.byte_unit(5 << 30) == (1 << 30, "GiB")


# ---------------------------------------------------------------------------------------------- terminal


def test_print_summary() -> None:
    buf = io.StringIO()
    print_summary(three_modes(), Console(file=buf, width=200, color_system=None))
    text = buf.getvalue()
    for mode in MODES:
        assert mode in text
    words = " ".join(text.split())  # rich wraps long sentences
    assert "Theoretical fan-out (receivers per multicast op, weighted by bytes): 3.00" in words
    assert re.search(r"source egress\s+│ 35\.2 KiB\s+│ 11\.7 KiB\s+│ 11\.7 KiB", text)
    assert re.search(r"source egress ÷\s+│ 3\.00×\s+│ 3\.00×", text)


def test_print_summary_without_unicast() -> None:
    buf = io.StringIO()
    print_summary([fx.run("net-bier")], Console(file=buf, width=200, color_system=None))
    assert "No unicast run in this group" in buf.getvalue()


# ---------------------------------------------------------------------------------------------- command


def _results(tmp_path: Path) -> Path:
    topo = fx.topology()
    t = datetime(2025, 6, 1, tzinfo=UTC)
    root = tmp_path / "results"
    for i, mode in enumerate(MODES):
        save_run(
            fx.run(mode, topo, run_id=new_run_id("leaf-spine", mode, now=t + timedelta(seconds=i))), root
        )
    return root


def test_report_command_help_has_examples() -> None:
    parser = argparse.ArgumentParser(prog="aidclab")
    sub = parser.add_subparsers()
    p = add_parser(sub)
    text = p.format_help()
    assert "aidclab report latest" in text and "--results-dir" in text and "--out" in text
    args = parser.parse_args(["report", "latest", "x", "--out", "o", "--results-dir", "r"])
    assert (args.runs, args.out, args.results_dir) == (["latest", "x"], "o", "r")
    assert args.func.__name__ == "cmd_report"


def test_resolve_specs_expands_latest_and_deduplicates(tmp_path: Path) -> None:
    root = _results(tmp_path)
    runs = sorted(root.iterdir())
    got = resolve_specs([runs[0].name, "latest"], root)
    assert got == [runs[0] / "run.json", runs[1] / "run.json", runs[2] / "run.json"]


def test_report_command_end_to_end(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _stub_plots(monkeypatch)
    root = _results(tmp_path)
    assert main(["latest", "--results-dir", str(root)]) == 0
    out_dir = root / "reports" / (sorted(p.name for p in root.iterdir() if p.name != "reports")[-1] + "+2")
    assert (out_dir / "report.md").is_file() and (out_dir / "report.html").is_file()
    captured = capsys.readouterr()
    for mode in MODES:
        assert mode in captured.out
    assert "report.html" in captured.err


def test_report_command_errors_name_the_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = _results(tmp_path)
    assert main(["report", "no-such-run", "--results-dir", str(root)]) == 1
    err = capsys.readouterr().err
    assert "no-such-run: no such run" in err and "latest" in err
