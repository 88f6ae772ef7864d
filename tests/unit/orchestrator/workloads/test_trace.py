"""orchestrator.workloads.trace: the version-1 trace format, its streaming reader, writer and summary."""

from __future__ import annotations

import io
import json
import math
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from orchestrator.workloads.trace import (
    SUPPORTED_VERSIONS,
    TraceError,
    TraceHeader,
    TraceOp,
    TraceReader,
    TraceWriter,
    dumps_trace,
    read_trace,
    summarize,
    write_trace,
)

HOSTS = ["h1", "h2", "h3", "h4"]


def header(**kw: object) -> TraceHeader:
    base: dict[str, object] = {
        "format": "aidclab-trace",
        "version": 1,
        "generator": "test",
        "params": {"seed": 3},
        "hosts": HOSTS,
    }
    base.update(kw)
    return TraceHeader(**base)  # type: ignore[arg-type]


def ops() -> list[TraceOp]:
    return [
        TraceOp(t=0.0, op="multicast", src="h1", dst=["h2", "h3", "h4"], bytes=100, tag="step0", id=0),
        TraceOp(t=0.0, op="unicast", src="h2", dst=["h1"], bytes=50, id=1),
        TraceOp(t=0.25, op="multicast", src="h3", dst=["h1", "h2"], bytes=10, id=5),
    ]


def sample_text() -> str:
    return dumps_trace(header(), ops())


# ---------------------------------------------------------------------------------------------- round trip


def test_round_trip_preserves_header_and_ops(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    write_trace(path, header(), ops())
    with TraceReader(path) as r:
        assert r.header == header()
        assert list(r) == ops()


def test_rewriting_a_read_trace_gives_the_same_bytes() -> None:
    text = sample_text()
    h, it = read_trace(io.StringIO(text))
    assert dumps_trace(h, it) == text


def test_written_lines_have_fixed_key_order_and_omit_absent_tag() -> None:
    lines = sample_text().splitlines()
    assert list(json.loads(lines[0])) == ["format", "version", "generator", "params", "hosts"]
    assert list(json.loads(lines[1])) == ["t", "op", "src", "dst", "bytes", "tag", "id"]
    assert list(json.loads(lines[2])) == ["t", "op", "src", "dst", "bytes", "id"]
    assert lines[2] == '{"t":0.0,"op":"unicast","src":"h2","dst":["h1"],"bytes":50,"id":1}'


@st.composite
def op_lists(draw: st.DrawFn) -> tuple[list[str], list[TraceOp]]:
    n = draw(st.integers(2, 6))
    hosts = [f"n{i}" for i in range(n)]
    out: list[TraceOp] = []
    t, next_id = 0.0, 0
    for _ in range(draw(st.integers(0, 15))):
        t += draw(st.floats(0, 10, allow_nan=False, allow_infinity=False))
        next_id += draw(st.integers(1, 3))
        src = draw(st.sampled_from(hosts))
        others = [h for h in hosts if h != src]
        dst = draw(st.lists(st.sampled_from(others), min_size=1, max_size=len(others), unique=True))
        kind = "unicast" if len(dst) == 1 and draw(st.booleans()) else "multicast"
        tag = draw(st.none() | st.text(max_size=8))
        out.append(
            TraceOp(t=t, op=kind, src=src, dst=dst, bytes=draw(st.integers(1, 2**40)), tag=tag, id=next_id)
        )
    return hosts, out


@settings(max_examples=60, deadline=None)
@given(op_lists())
def test_round_trip_property(data: tuple[list[str], list[TraceOp]]) -> None:
    hosts, written = data
    text = dumps_trace(header(hosts=hosts), written)
    h, it = read_trace(io.StringIO(text))
    assert h.hosts == hosts
    assert list(it) == written


# ---------------------------------------------------------------------------------------------- errors


def _read_all(tmp_path: Path, text: str) -> None:
    path = tmp_path / "trace.jsonl"
    path.write_text(text)
    with TraceReader(path) as r:
        list(r)


def _with_line(op_line: str) -> str:
    """The sample trace with one more op as line 5."""
    return sample_text() + op_line + "\n"


OP_ERRORS = [
    ('{"t":1,"op":"unicast","src":"h1","dst":["h2"],"bytes":0,"id":9}', "bytes", "must be > 0"),
    ('{"t":1,"op":"unicast","src":"h1","dst":["h2"],"bytes":"7","id":9}', "bytes", "must be an integer"),
    ('{"t":1,"op":"unicast","src":"h1","dst":["h2"],"bytes":1.5,"id":9}', "bytes", "must be an integer"),
    ('{"t":1,"op":"unicast","src":"h1","dst":["h2"],"id":9}', "bytes", "required but missing"),
    ('{"t":1,"op":"unicast","src":"h1","dst":["h2"],"bytes":1,"id":9,"prio":1}', "prio", "unknown field"),
    ('{"t":1,"op":"broadcast","src":"h1","dst":["h2"],"bytes":1,"id":9}', "op", "'multicast', 'unicast'"),
    ('{"t":1,"op":"multicast","src":"h1","dst":["h2","h1"],"bytes":1,"id":9}', "dst", "contains the source"),
    (
        '{"t":1,"op":"multicast","src":"h1","dst":["h2","h9"],"bytes":1,"id":9}',
        "dst",
        "'h9' is not in the header",
    ),
    ('{"t":1,"op":"multicast","src":"h9","dst":["h2"],"bytes":1,"id":9}', "src", "'h9' is not in the header"),
    ('{"t":1,"op":"multicast","src":"h1","dst":["h2","h2"],"bytes":1,"id":9}', "dst", "listed twice"),
    ('{"t":1,"op":"multicast","src":"h1","dst":[],"bytes":1,"id":9}', "dst", "must not be empty"),
    ('{"t":1,"op":"unicast","src":"h1","dst":["h2","h3"],"bytes":1,"id":9}', "dst", "exactly one receiver"),
    ('{"t":-1,"op":"unicast","src":"h1","dst":["h2"],"bytes":1,"id":9}', "t", "must be >= 0"),
    ('{"t":0.1,"op":"unicast","src":"h1","dst":["h2"],"bytes":1,"id":9}', "t", "must not go back in time"),
    (
        '{"t":1,"op":"unicast","src":"h1","dst":["h2"],"bytes":1,"id":5}',
        "id",
        "must increase: 5 after 5 at line 4",
    ),
    ('{"t":1,"op":"unicast","src":"h1","dst":"h2","bytes":1,"id":9}', "dst", "must be a list"),
]


@pytest.mark.parametrize(("line", "field", "message"), OP_ERRORS)
def test_op_errors_name_file_line_and_field(tmp_path: Path, line: str, field: str, message: str) -> None:
    with pytest.raises(TraceError) as exc:
        _read_all(tmp_path, _with_line(line))
    text = str(exc.value)
    assert text.startswith(f"trace.jsonl line 5: field '{field}': "), text
    assert message in text
    assert exc.value.line == 5
    assert exc.value.field == field


def test_message_format_matches_the_documented_one(tmp_path: Path) -> None:
    with pytest.raises(TraceError) as exc:
        _read_all(tmp_path, _with_line(OP_ERRORS[0][0]))
    assert str(exc.value) == "trace.jsonl line 5: field 'bytes': must be > 0, got 0"


@pytest.mark.parametrize(
    ("line", "message"),
    [("{not json", "not valid JSON"), ("[1, 2]", "must be a JSON object"), ('"op"', "must be a JSON object")],
)
def test_malformed_lines_are_reported_by_line(tmp_path: Path, line: str, message: str) -> None:
    with pytest.raises(TraceError, match=rf"^trace\.jsonl line 5: {message}"):
        _read_all(tmp_path, _with_line(line))


def test_several_problems_on_one_line_are_all_reported(tmp_path: Path) -> None:
    with pytest.raises(TraceError) as exc:
        _read_all(tmp_path, _with_line('{"t":1,"op":"x","src":"h1","dst":["h2"],"bytes":-3,"id":9}'))
    assert {f for f, _ in exc.value.problems} == {"op", "bytes"}
    assert all(part.startswith("trace.jsonl line 5: field '") for part in str(exc.value).splitlines())


def test_blank_lines_are_skipped_but_counted(tmp_path: Path) -> None:
    text = (
        sample_text().replace("\n", "\n\n", 2)
        + '{"t":1,"op":"unicast","src":"h1","dst":["h2"],"bytes":0,"id":9}\n'
    )
    with pytest.raises(TraceError, match=r"^trace\.jsonl line 7: field 'bytes'"):
        _read_all(tmp_path, text)


def test_unsupported_version_names_the_supported_ones(tmp_path: Path) -> None:
    # A future header may carry fields we do not know; the version must be what we complain about.
    first = json.dumps({"format": "aidclab-trace", "version": 3, "generator": "x", "hosts": ["a"], "new": 1})
    with pytest.raises(TraceError) as exc:
        _read_all(tmp_path, first + "\n")
    assert str(exc.value).startswith("trace.jsonl line 1: field 'version': unsupported version 3")
    assert f"supports version(s) {', '.join(map(str, SUPPORTED_VERSIONS))}" in str(exc.value)


@pytest.mark.parametrize(
    ("first", "field", "message"),
    [
        (
            '{"t":0,"op":"unicast","src":"h1","dst":["h2"],"bytes":1,"id":0}',
            "format",
            "must be 'aidclab-trace'",
        ),
        ('{"format":"aidclab-trace","version":1,"generator":"g","hosts":["a","a"]}', "hosts", "listed twice"),
        ('{"format":"aidclab-trace","version":1,"generator":"g","hosts":[]}', "hosts", "must not be empty"),
        (
            '{"format":"aidclab-trace","version":1,"generator":"g","hosts":["a b"]}',
            "hosts",
            "not a node name",
        ),
        ('{"format":"aidclab-trace","version":1,"hosts":["a"]}', "generator", "required but missing"),
        ('{"format":"aidclab-trace","version":1,"generator":"g","hosts":["a"],"x":0}', "x", "unknown field"),
        ('{"format":"aidclab-trace","version":"1","generator":"g","hosts":["a"]}', "version", "unsupported"),
    ],
)
def test_header_errors(tmp_path: Path, first: str, field: str, message: str) -> None:
    with pytest.raises(TraceError) as exc:
        _read_all(tmp_path, first + "\n")
    assert str(exc.value).startswith(f"trace.jsonl line 1: field '{field}': ")
    assert message in str(exc.value)


def test_empty_trace_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match=r"^trace\.jsonl: empty trace"):
        _read_all(tmp_path, "\n\n")


def test_allreduce_is_reserved_but_parses() -> None:
    text = sample_text() + '{"t":1,"op":"allreduce","src":"h1","dst":["h2","h3"],"bytes":8,"id":9}\n'
    _, it = read_trace(io.StringIO(text))
    assert [o.op for o in it][-1] == "allreduce"


def test_the_op_model_checks_cross_field_rules_without_a_reader() -> None:
    with pytest.raises(ValidationError, match="exactly one receiver"):
        TraceOp(t=0, op="unicast", src="h1", dst=["h2", "h3"], bytes=1, id=0)
    with pytest.raises(ValidationError, match="contains the source"):
        TraceOp(t=0, op="multicast", src="h1", dst=["h1"], bytes=1, id=0)


def test_writer_applies_the_readers_checks() -> None:
    w = TraceWriter(io.StringIO(), header())
    with pytest.raises(TraceError, match="field 'dst': host 'h9'"):
        w.write(TraceOp(t=0, op="unicast", src="h1", dst=["h9"], bytes=1, id=0))
    w.write(TraceOp(t=1, op="unicast", src="h1", dst=["h2"], bytes=1, id=0))
    with pytest.raises(TraceError, match="field 't': must not go back"):
        w.write(TraceOp(t=0.5, op="unicast", src="h1", dst=["h2"], bytes=1, id=1))
    with pytest.raises(TraceError, match="field 'id': must increase"):
        w.write(TraceOp(t=1, op="unicast", src="h1", dst=["h2"], bytes=1, id=0))


# ---------------------------------------------------------------------------------------------- streaming


class LineStream(io.TextIOBase):
    """A text stream backed by a generator, counting lines handed out; reading it whole is an error."""

    def __init__(self, lines: Iterator[str]) -> None:
        self._lines = lines
        self.pulled = 0

    def readable(self) -> bool:
        return True

    def readline(self, size: int | None = -1) -> str:
        line = next(self._lines, "")
        if line:
            self.pulled += 1
        return line

    def read(self, size: int | None = -1) -> str:
        raise AssertionError("the reader must not read the whole stream")

    def readlines(self, hint: int = -1) -> list[str]:  # type: ignore[override]
        raise AssertionError("the reader must not read the whole stream")


def endless_trace() -> Iterator[str]:
    yield json.dumps({"format": "aidclab-trace", "version": 1, "generator": "g", "hosts": ["a", "b"]}) + "\n"
    i = 0
    while True:
        yield json.dumps({"t": i, "op": "unicast", "src": "a", "dst": ["b"], "bytes": 1, "id": i}) + "\n"
        i += 1


def test_reader_streams_from_an_endless_source() -> None:
    stream = LineStream(endless_trace())
    reader = TraceReader(stream)
    assert stream.pulled == 1  # only the header so far
    got = []
    for op in reader:
        got.append(op.id)
        if len(got) == 3:
            break
    assert got == [0, 1, 2]
    assert stream.pulled == 4


def test_a_bad_line_fails_only_when_reached() -> None:
    lines = [*sample_text().splitlines(keepends=True), "garbage\n"]
    it = iter(TraceReader(LineStream(iter(lines))))
    assert [next(it).id for _ in range(3)] == [0, 1, 5]
    with pytest.raises(TraceError, match="line 5"):
        next(it)


def test_reader_accepts_a_plain_iterable_of_lines() -> None:
    h, it = read_trace(sample_text().splitlines())
    assert h.generator == "test"
    assert len(list(it)) == 3


def test_reader_can_be_iterated_once() -> None:
    r = TraceReader(io.StringIO(sample_text()))
    list(r)
    with pytest.raises(RuntimeError, match="once"):
        list(r)


def test_path_reader_closes_its_file(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(sample_text())
    r = TraceReader(path)
    f = r._owned
    assert f is not None and not f.closed
    list(r)
    assert f.closed


# ---------------------------------------------------------------------------------------------- summary


def test_summary_counts_bytes_and_fanout() -> None:
    s = summarize(io.StringIO(sample_text()))
    assert s.ops == 3
    assert s.ops_by_kind == {"multicast": 2, "unicast": 1}
    assert s.bytes == 160
    assert s.delivered_bytes == 100 * 3 + 50 + 10 * 2
    assert s.fanout_hist == {1: 1, 2: 1, 3: 1}
    assert s.fanout_mean == pytest.approx(2.0)
    assert s.multicast_saving == pytest.approx(1 - 160 / 370)
    assert s.duration == 0.25
    assert s.tx_bytes == {"h1": 100, "h2": 50, "h3": 10, "h4": 0}
    assert s.rx_bytes == {"h1": 60, "h2": 110, "h3": 100, "h4": 100}
    assert "3 ops" in s.one_line()


def test_summary_of_allreduce_ops_speaks_of_workers_not_multicast() -> None:
    """`workload allreduce` printed "multicast saves 66.7%" for an AllReduce trace: it has no receivers to
    copy to, so no multicast saving; its line says what an AllReduce is (size, workers)."""
    ar = [
        TraceOp(t=0.0, op="allreduce", src="h1", dst=["h2", "h3", "h4"], bytes=1 << 20, id=i)
        for i in range(2)
    ]
    s = summarize(io.StringIO(dumps_trace(header(), ar)))
    line = s.one_line()
    assert "multicast" not in line and "fan-out" not in line
    assert "AllReduce 2.0 MiB in total (1.0 MiB per op), 4 workers per op" in line
    assert s.multicast_saving == 0.0


def test_summary_of_a_mixed_trace_counts_the_saving_over_its_messages_only() -> None:
    ar = TraceOp(t=0.3, op="allreduce", src="h1", dst=["h2", "h3", "h4"], bytes=1000, id=6)
    s = summarize(io.StringIO(dumps_trace(header(), [*ops(), ar])))
    assert s.multicast_saving == pytest.approx(1 - 160 / 370)  # as without the AllReduce op
    line = s.one_line()
    assert "160 B sent, 370 B delivered, fan-out mean 2.00, multicast saves 56.8%" in line
    assert "AllReduce 1000 B in total (1000 B per op), 4 workers per op" in line


def test_summary_streams_too() -> None:
    def bounded() -> Iterator[str]:
        for n, line in enumerate(endless_trace()):
            if n > 1000:
                return
            yield line

    stream = LineStream(bounded())
    s = summarize(stream)
    assert s.ops == 1000
    assert s.fanout_hist == {1: 1000}


def test_summary_of_header_only_trace() -> None:
    s = summarize(io.StringIO(dumps_trace(header(), [])))
    assert (s.ops, s.bytes, s.fanout_mean, s.multicast_saving) == (0, 0, 0.0, 0.0)


def test_non_finite_time_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="field 't'"):
        _read_all(
            tmp_path, _with_line('{"t":Infinity,"op":"unicast","src":"h1","dst":["h2"],"bytes":1,"id":9}')
        )
    with pytest.raises(ValidationError):
        TraceOp(t=math.nan, op="unicast", src="h1", dst=["h2"], bytes=1, id=0)


# ---------------------------------------------------------------------------------------------- version 2


def v2_text(*lines: str) -> str:
    head = header(version=2).model_dump(mode="json")
    return "\n".join([json.dumps(head, separators=(",", ":")), *lines]) + "\n"


def test_version_2_reads_dependencies_and_compute_and_writes_them_back() -> None:
    from orchestrator.workloads.trace import ComputeOp, closed_loop, message_ops, transfers

    text = v2_text(
        '{"t":0.0,"op":"compute","src":"h1","seconds":2.5e-05,"tag":"L0 attention","id":0}',
        '{"t":0.0,"op":"multicast","src":"h1","dst":["h2","h3"],"bytes":100,"after":[0],"id":1}',
        '{"t":0.0,"op":"compute","src":"h2","seconds":1e-05,"after":[1],"id":2}',
        '{"t":0.0,"op":"allreduce","src":"h1","dst":["h2"],"bytes":64,"after":[0,2],"id":3}',
    )
    got = list(TraceReader(io.StringIO(text)))
    assert isinstance(got[0], ComputeOp) and got[0].seconds == 2.5e-05 and got[0].dst == []
    assert got[1].after == [0] and got[3].after == [0, 2]
    assert closed_loop(got) and not closed_loop(ops())
    assert [o.id for o in transfers(got)] == [1, 3] and [o.id for o in message_ops(got)] == [1]
    assert dumps_trace(header(version=2), got) == text
    s = summarize(io.StringIO(text))
    assert s.ops == 4 and s.ops_by_kind["compute"] == 2 and s.compute_seconds == pytest.approx(3.5e-05)
    assert s.dependencies == 4 and s.bytes == 164 and s.fanout_mean == pytest.approx(1.5)
    assert "closed loop: 4 dependencies" in s.one_line()


def test_version_1_reads_as_before_and_writes_nothing_new() -> None:
    # An open-loop trace is a valid version-2 trace too, read the same way.
    again = list(TraceReader(io.StringIO(v2_text(*sample_text().splitlines()[1:]))))
    assert again == ops()
    assert '"after"' not in sample_text()


@pytest.mark.parametrize(
    "version,line,field,words",
    [
        (1, '{"t":0.0,"op":"unicast","src":"h1","dst":["h2"],"bytes":1,"after":[0],"id":9}', "after",
         "'after' needs trace version 2 (the header says 1)"),
        (1, '{"t":0.0,"op":"compute","src":"h1","seconds":1,"id":9}', "op", "must be"),
        (2, '{"t":0.0,"op":"unicast","src":"h1","dst":["h2"],"bytes":1,"after":[7],"id":9}', "after",
         "op 7 is not an op above this one"),
        (2, '{"t":0.0,"op":"unicast","src":"h4","dst":["h2"],"bytes":1,"after":[1],"id":9}', "after",
         "op 1 involves h1, h2, not h4"),
        (2, '{"t":0.0,"op":"compute","src":"h1","seconds":-1,"id":9}', "seconds", "must be >= 0"),
        (2, '{"t":0.0,"op":"compute","src":"h1","seconds":1,"dst":["h2"],"id":9}', "dst", "unknown field"),
        (2, '{"t":0.0,"op":"unicast","src":"h1","dst":["h2"],"bytes":1,"after":[0,0],"id":9}', "after",
         "op 0 is listed twice"),
    ],
)
def test_version_2_errors_name_the_line_and_field(tmp_path: Path, version, line, field, words) -> None:
    first = '{"t":0.0,"op":"unicast","src":"h1","dst":["h2"],"bytes":1,"id":0}'
    second = '{"t":0.0,"op":"unicast","src":"h2","dst":["h1"],"bytes":1,"id":1}'
    head = json.dumps(header(version=version).model_dump(mode="json"))
    with pytest.raises(TraceError) as exc:
        _read_all(tmp_path, "\n".join([head, first, second, line]) + "\n")
    assert exc.value.line == 4 and exc.value.field == field and words in str(exc.value), str(exc.value)


def test_an_allreduce_waits_only_for_what_concerns_one_of_its_workers(tmp_path: Path) -> None:
    ok = v2_text(
        '{"t":0.0,"op":"compute","src":"h3","seconds":1,"id":0}',
        '{"t":0.0,"op":"allreduce","src":"h1","dst":["h3"],"bytes":4,"after":[0],"id":1}',
    )
    assert len(list(TraceReader(io.StringIO(ok)))) == 2
    bad = ok.replace('"src":"h3","seconds"', '"src":"h4","seconds"')
    with pytest.raises(TraceError, match="op 0 involves h4, not h1 or h3"):
        _read_all(tmp_path, bad)
