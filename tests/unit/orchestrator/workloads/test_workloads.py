"""Trace generators (orchestrator.workloads) and their CLI."""

from __future__ import annotations

import argparse
import io
import itertools
import math
import re
import shlex
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.cli import workload as cli
from orchestrator.paths import ROOT as ROOT_DIR
from orchestrator.workloads import Workload, alltoall, checkpoint, model_distribution, moe
from orchestrator.workloads.trace import TraceOp, TraceReader, read_trace

REPO = ROOT_DIR
H8 = tuple(f"h{i}" for i in range(1, 9))


def text_of(w: Workload) -> str:
    buf = io.StringIO()
    w.write(buf)
    return buf.getvalue()


def ops_of(w: Workload) -> list[TraceOp]:
    return list(read_trace(io.StringIO(text_of(w)))[1])


# ---------------------------------------------------------------------------------------------- determinism

GENERATORS = [
    (moe.generate, lambda seed: moe.MoEParams(hosts=H8, steps=2, tokens_per_host=32, seed=seed)),
    (
        moe.generate,
        lambda seed: moe.MoEParams(hosts=H8, tokens_per_host=32, skew="zipf", zipf_s=1.3, seed=seed),
    ),
    (
        model_distribution.generate,
        lambda seed: model_distribution.ModelDistParams(hosts=H8, size=10**6, seed=seed),
    ),
    (
        checkpoint.generate,
        lambda seed: checkpoint.CheckpointParams(hosts=H8, shard_bytes=3 << 20, replicas=3, seed=seed),
    ),
    (alltoall.generate, lambda seed: alltoall.AllToAllParams(hosts=H8, size=5 << 20, seed=seed)),
]


@pytest.mark.parametrize(("gen", "make"), GENERATORS)
def test_same_params_give_identical_bytes(gen, make) -> None:  # type: ignore[no-untyped-def]
    assert text_of(gen(make(5))) == text_of(gen(make(5)))


@pytest.mark.parametrize(("gen", "make"), [GENERATORS[0], GENERATORS[1], GENERATORS[3]])
def test_seeded_generators_differ_with_the_seed(gen, make) -> None:  # type: ignore[no-untyped-def]
    a, b = text_of(gen(make(1))), text_of(gen(make(2)))
    # Headers differ anyway (they record the seed); the ops must differ too.
    assert a.split("\n", 1)[1] != b.split("\n", 1)[1]


def test_header_records_generator_params_and_hosts() -> None:
    w = moe.generate(moe.MoEParams(hosts=H8, seed=9, skew="zipf"))
    assert w.header.generator == "moe"
    assert w.header.hosts == list(H8)
    assert w.header.params["seed"] == 9 and w.header.params["skew"] == "zipf"
    assert "hosts" not in w.header.params
    # Everything needed to regenerate is recorded.
    again = moe.MoEParams(hosts=tuple(w.header.hosts), **w.header.params)
    assert text_of(moe.generate(again)) == text_of(w)


# ---------------------------------------------------------------------------------------------- MoE


def test_deepseek_v3_defaults() -> None:
    p = moe.MoEParams(hosts=H8)
    assert (p.experts, p.top_k, p.max_nodes, p.bytes_per_token) == (256, 8, 4, 7408)


def test_expert_placement_is_contiguous_round_robin() -> None:
    pl = moe.expert_placement(256, 8)
    assert list(pl[:32]) == [0] * 32 and pl[32] == 1 and pl[255] == 7
    uneven = moe.expert_placement(10, 3)
    assert list(uneven) == sorted(uneven)
    sizes = np.bincount(uneven)
    assert sizes.max() - sizes.min() <= 1 and sizes.sum() == 10


def brute_force_route(aff: np.ndarray, placement: np.ndarray, top_k: int, max_nodes: int) -> list[set[int]]:
    """DeepSeek-V3 node-limited routing, written the slow obvious way."""
    n_hosts = int(placement.max()) + 1
    per_node = math.ceil(top_k / max_nodes)
    out = []
    for row in aff:
        score = {}
        for h in range(n_hosts):
            mine = sorted((row[e] for e in range(len(row)) if placement[e] == h), reverse=True)
            score[h] = sum(mine[:per_node])
        nodes = sorted(score, key=lambda h: -score[h])[: min(max_nodes, n_hosts)]
        allowed = [e for e in range(len(row)) if placement[e] in nodes]
        out.append(set(sorted(allowed, key=lambda e: -row[e])[:top_k]))
    return out


def test_route_matches_the_node_limited_rule() -> None:
    rng = np.random.default_rng(0)
    placement = moe.expert_placement(64, 8)
    aff = moe.affinities(np.zeros(64), 50, rng)
    fast = moe.route(aff, placement, top_k=8, max_nodes=4)
    assert [set(r.tolist()) for r in fast] == brute_force_route(aff, placement, 8, 4)


def test_node_limit_binds() -> None:
    # Without the limit, 8 experts out of 8 hosts would usually touch 5 or more hosts.
    rng = np.random.default_rng(1)
    placement = moe.expert_placement(256, 8)
    aff = moe.affinities(np.zeros(256), 400, rng)
    limited = {len(set(placement[r].tolist())) for r in moe.route(aff, placement, 8, 4)}
    unlimited = {len(set(placement[r].tolist())) for r in moe.route(aff, placement, 8, 8)}
    assert max(limited) == 4
    assert max(unlimited) > 4


@settings(max_examples=40, deadline=None)
@given(
    n_hosts=st.integers(2, 12),
    per_host=st.integers(1, 8),
    top_k=st.integers(1, 8),
    max_nodes=st.integers(1, 6),
    skew=st.sampled_from(["uniform", "zipf"]),
    seed=st.integers(0, 2**32),
)
def test_moe_invariants(
    n_hosts: int, per_host: int, top_k: int, max_nodes: int, skew: str, seed: int
) -> None:
    experts = n_hosts * per_host
    if per_host * min(max_nodes, n_hosts) < top_k:
        with pytest.raises(ValueError, match="top_k"):
            moe.MoEParams(
                hosts=tuple(f"g{i}" for i in range(n_hosts)),
                experts=experts,
                top_k=top_k,
                max_nodes=max_nodes,
            )
        return
    p = moe.MoEParams(
        hosts=tuple(f"g{i}" for i in range(n_hosts)),
        experts=experts,
        top_k=top_k,
        max_nodes=max_nodes,
        steps=2,
        tokens_per_host=20,
        skew=skew,  # type: ignore[arg-type]
        seed=seed,
        bytes_per_token=100,
    )
    placement = moe.expert_placement(experts, n_hosts)
    expected_delivered = 0
    expected_sent = 0
    for _, src, chosen in moe.routes(p):
        for row in chosen:
            assert len(set(row.tolist())) == top_k  # exactly top-k distinct experts
            nodes = set(placement[row].tolist())
            assert len(nodes) <= min(max_nodes, n_hosts)
            remote = nodes - {src}
            expected_delivered += len(remote) * p.bytes_per_token
            expected_sent += p.bytes_per_token if remote else 0
    w = moe.generate(p)
    got = ops_of(w)
    assert all(o.src not in o.dst for o in got)
    assert all(len(o.dst) <= min(max_nodes, n_hosts) for o in got)
    assert all((o.op == "unicast") == (len(o.dst) == 1) for o in got)
    assert all(o.bytes % p.bytes_per_token == 0 for o in got)
    # Bytes accounting: sum(bytes x fan-out) = tokens x remote expert hosts x bytes_per_token.
    assert sum(o.bytes * len(o.dst) for o in got) == expected_delivered
    assert sum(o.bytes for o in got) == expected_sent
    assert w.stats["unicast_bytes"] == expected_delivered
    assert w.stats["tokens"] == 2 * 20 * n_hosts
    assert sum(w.stats["expert_loads"]) == w.stats["tokens"] * top_k


def test_ops_group_one_sources_tokens_by_receiver_set() -> None:
    params = moe.MoEParams(hosts=H8, steps=3, tokens_per_host=64, seed=4, step_interval=0.001)
    got = ops_of(moe.generate(params))
    keys = [(o.tag, o.src, tuple(o.dst)) for o in got]
    assert len(keys) == len(set(keys))  # one op per (step, source, receiver set)
    assert any(o.bytes > 7408 for o in got)  # and grouping really merged tokens
    step_of = {f"step{i}": i * 0.001 for i in range(3)}
    assert all(o.t == step_of[o.tag or ""] for o in got)


def test_moe_sends_only_to_expert_hosts_and_skips_local_experts() -> None:
    # One expert per host and top-1: a token either stays home or goes to the other host.
    p = moe.MoEParams(hosts=("a", "b"), experts=2, top_k=1, max_nodes=1, steps=1, tokens_per_host=200, seed=3)
    w = moe.generate(p)
    got = ops_of(w)
    assert {(o.src, tuple(o.dst)) for o in got} == {("a", ("b",)), ("b", ("a",))}
    # About half the tokens pick the local expert and send nothing.
    assert 100 < w.stats["local_only_tokens"] < 300
    assert sum(o.bytes for o in got) == (400 - w.stats["local_only_tokens"]) * p.bytes_per_token


def test_gini_function() -> None:
    assert moe.gini([5, 5, 5, 5]) == pytest.approx(0.0)
    assert moe.gini([0, 0, 0, 12]) == pytest.approx(0.75)
    assert moe.gini([]) == 0.0 and moe.gini([0, 0]) == 0.0
    assert moe.gini([1, 2, 3, 4]) == pytest.approx(0.25)


def _gini(skew: str, s: float = 1.0) -> float:
    w = moe.generate(moe.MoEParams(hosts=H8, steps=2, tokens_per_host=2000, skew=skew, zipf_s=s, seed=11))  # type: ignore[arg-type]
    for _ in w.ops:
        pass
    return float(w.stats["gini"])


def test_gini_near_zero_for_uniform_and_high_for_zipf() -> None:
    uniform, zipf = _gini("uniform"), _gini("zipf", 1.0)
    assert uniform < 0.05
    assert zipf > 0.4
    assert _gini("zipf", 0.5) < zipf


def test_zipf_popular_experts_get_the_load() -> None:
    p = moe.MoEParams(hosts=H8, steps=1, tokens_per_host=1000, skew="zipf", zipf_s=1.0, seed=2)
    w = moe.generate(p)
    for _ in w.ops:
        pass
    log_w = moe.expert_log_weights(p, np.random.default_rng(p.seed))
    loads = np.array(w.stats["expert_loads"])
    hot, cold = np.argsort(-log_w)[:16], np.argsort(log_w)[:128]
    assert loads[hot].mean() > 5 * loads[cold].mean()
    # Hot experts are scattered over hosts, not piled on the first one.
    assert len(set(moe.expert_placement(256, 8)[hot].tolist())) >= 4


def test_moe_rejects_impossible_routing() -> None:
    with pytest.raises(ValueError, match=r"experts .* must be >= the number of hosts"):
        moe.MoEParams(hosts=H8, experts=4)
    with pytest.raises(ValueError, match="top_k"):
        moe.MoEParams(hosts=H8, experts=16, top_k=9, max_nodes=4)


# ---------------------------------------------------------------------------------------------- the others


def test_model_distribution() -> None:
    p = model_distribution.ModelDistParams(hosts=H8, size=10 * 1000 + 7, chunk_bytes=1000, chunk_interval=0.5)
    got = ops_of(model_distribution.generate(p))
    assert len(got) == 11
    assert sum(o.bytes for o in got) == 10_007 and got[-1].bytes == 7
    assert all(o.src == "h1" and o.dst == list(H8[1:]) and o.op == "multicast" for o in got)
    assert [o.t for o in got[:3]] == [0.0, 0.5, 1.0]
    other = ops_of(model_distribution.generate(p.model_copy(update={"source": "h4"})))
    assert all(o.src == "h4" and "h4" not in o.dst and len(o.dst) == 7 for o in other)
    with pytest.raises(ValueError, match="source 'x9' is not one of the hosts"):
        model_distribution.ModelDistParams(hosts=H8, source="x9")


def test_model_distribution_to_one_receiver_is_unicast() -> None:
    got = ops_of(model_distribution.generate(model_distribution.ModelDistParams(hosts=("a", "b"), size=10)))
    assert [(o.op, o.dst) for o in got] == [("unicast", ["b"])]


@pytest.mark.parametrize("replicas", [1, 2, 3, 7])
def test_checkpoint_every_host_stores_k_replicas_never_its_own(replicas: int) -> None:
    p = checkpoint.CheckpointParams(hosts=H8, shard_bytes=2500, chunk_bytes=1000, replicas=replicas, seed=3)
    got = ops_of(checkpoint.generate(p))
    sent = Counter[str]()
    targets: dict[str, set[str]] = {}
    for o in got:
        assert o.src not in o.dst and len(o.dst) == replicas
        assert o.op == ("multicast" if replicas > 1 else "unicast")
        sent[o.src] += o.bytes
        targets.setdefault(o.src, set()).update(o.dst)
    assert sent == {h: 2500 for h in H8}
    assert all(len(t) == replicas for t in targets.values())  # same replica set for every chunk
    stored = Counter(h for t in targets.values() for h in t)
    assert stored == {h: replicas for h in H8}  # balanced: no storage hot spot


def test_checkpoint_with_dedicated_storage() -> None:
    p = checkpoint.CheckpointParams(hosts=H8, storage=("h6", "h7", "h8"), replicas=2, shard_bytes=10, seed=1)
    sets = checkpoint.replica_sets(p)
    assert set(sets) == {"h1", "h2", "h3", "h4", "h5"}
    assert all(len(v) == 2 and set(v) <= {"h6", "h7", "h8"} for v in sets.values())
    load = Counter(h for v in sets.values() for h in v)
    assert max(load.values()) - min(load.values()) <= 1


def test_checkpoint_seed_changes_pairing() -> None:
    sets = {
        str(checkpoint.replica_sets(checkpoint.CheckpointParams(hosts=H8, replicas=2, seed=s)))
        for s in range(5)
    }
    assert len(sets) > 1


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"replicas": 8}, "replicas \\(8\\) exceeds the 7"),
        ({"storage": ("h9",)}, "storage host 'h9'"),
        ({"storage": H8}, "nobody writes"),
        ({"storage": ("h7", "h8"), "replicas": 3}, "exceeds the 2"),
    ],
)
def test_checkpoint_rejects_bad_params(kw: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        checkpoint.CheckpointParams(hosts=H8, **kw)  # type: ignore[arg-type]


def test_all_to_all_unicast_covers_every_pair_once() -> None:
    p = alltoall.AllToAllParams(hosts=H8, size=2500, chunk_bytes=1000)
    got = ops_of(alltoall.generate(p))
    per_pair = Counter[tuple[str, str]]()
    for o in got:
        assert o.op == "unicast"
        per_pair[(o.src, o.dst[0])] += o.bytes
    assert per_pair == {(a, b): 2500 for a in H8 for b in H8 if a != b}
    # Ring order: each source starts with its successor.
    first = [o for o in got if o.t == 0.0][:7]
    assert [o.dst[0] for o in first] == list(H8[1:])


def test_all_to_all_identical_is_one_multicast_per_source_and_chunk() -> None:
    uni = alltoall.AllToAllParams(hosts=H8, size=2500, chunk_bytes=1000)
    multi = uni.model_copy(update={"identical": True})
    got = ops_of(alltoall.generate(multi))
    assert len(got) == 8 * 3
    assert all(o.op == "multicast" and len(o.dst) == 7 for o in got)

    def delivered(ops: list[TraceOp]) -> int:
        return sum(o.bytes * len(o.dst) for o in ops)

    assert delivered(got) == delivered(ops_of(alltoall.generate(uni)))


# ---------------------------------------------------------------------------------------------- CLI


SAMPLE_RE = re.compile(r"^python -m orchestrator\.cli\.workload (.+ -o (workloads/\S+\.jsonl))$", re.M)


def documented_commands() -> list[tuple[str, list[str]]]:
    readme = (REPO / "workloads" / "README.md").read_text()
    return [(m.group(2), shlex.split(m.group(1))) for m in SAMPLE_RE.finditer(readme)]


def test_readme_documents_all_five_samples() -> None:
    assert sorted(f for f, _ in documented_commands()) == [
        "workloads/all-to-all-sample.jsonl",
        "workloads/allreduce-sample.jsonl",
        "workloads/checkpoint-sample.jsonl",
        "workloads/model-dist-sample.jsonl",
        "workloads/moe-sample.jsonl",
    ]


@pytest.mark.parametrize(("sample", "argv"), documented_commands())
def test_committed_samples_equal_what_the_documented_commands_produce(
    tmp_path: Path, sample: str, argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "regen.jsonl"
    argv = [str(out) if a == sample else a for a in argv]
    assert cli.main(argv) == 0
    committed = REPO / sample
    assert out.read_bytes() == committed.read_bytes(), (
        f"{sample} is stale: re-run the command in workloads/README.md"
    )
    assert committed.stat().st_size < 200_000
    with TraceReader(committed) as r:
        # The AllReduce sample is for ina-fig1's job 1 (w1..w4); the others for leaf-spine's h1..h8.
        assert r.header.hosts == (["w1", "w2", "w3", "w4"] if "allreduce" in sample else list(H8))
        assert 0 < sum(1 for _ in r) <= 300


def test_cli_prints_a_one_line_summary_with_gini(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "m.jsonl"
    assert cli.main(["moe", "--hosts-count", "4", "--tokens-per-host", "8", "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert re.search(r"moe: \d+ ops .* fan-out mean \d\.\d\d.*expert-load Gini 0\.\d{3} -> ", err)
    with TraceReader(out) as r:
        assert r.header.hosts == ["gpu1", "gpu2", "gpu3", "gpu4"]


def test_cli_writes_stdout_without_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["model-dist", "--hosts", "a,b,c", "--size", "3KiB", "--chunk-bytes", "1KiB"]) == 0
    out = capsys.readouterr()
    h, it = read_trace(io.StringIO(out.out))
    assert h.hosts == ["a", "b", "c"] and [o.bytes for o in it] == [1024] * 3
    assert "model-dist: 3 ops" in out.err


def test_cli_accepts_a_leading_workload_word(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["workload", "all-to-all", "--hosts-count", "2", "--size", "10"]) == 0
    assert "all-to-all: 2 ops" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["moe", "--tokens-per-host", "0"], "--tokens-per-host: must be >= 1"),
        (["moe", "--hosts-count", "1"], "--hosts-count: at least 2 hosts"),
        (["moe", "--hosts", "a,,b"], "expected comma-separated host names"),
        (["checkpoint", "--replicas", "9"], "replicas (9) exceeds"),
        (["model-dist", "--size", "12parsecs"], "is not a size"),
        (["moe", "--skew", "pareto"], "invalid choice"),
    ],
)
def test_cli_errors_name_the_option(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("command", ["moe", "model-dist", "checkpoint", "all-to-all", "summary"])
def test_help_shows_defaults_and_an_example(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main([command, "--help"])
    text = capsys.readouterr().out
    assert "example:" in text and f"aidclab workload {command}" in text
    if command != "summary":
        assert "(default: 0)" in text  # --seed
        assert "--hosts-count N" in text and "-o FILE, --output FILE" in text


def test_help_defaults_match_the_models(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["moe", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "(default: 256)" in text and "(default: 7408)" in text and "(default: 128)" in text


def test_add_parser_plugs_into_a_main_cli(capsys: pytest.CaptureFixture[str]) -> None:
    main = argparse.ArgumentParser(prog="aidclab")
    cli.add_parser(main.add_subparsers(dest="command"))
    args = main.parse_args(["workload", "checkpoint", "--hosts-count", "3", "--shard-bytes", "1KiB"])
    assert args.func(args) == 0
    assert "checkpoint: 3 ops" in capsys.readouterr().err


def test_summary_command(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert cli.main(["summary", str(REPO / "workloads" / "checkpoint-sample.jsonl")]) == 0
    out = capsys.readouterr().out
    assert "checkpoint: 32 ops (multicast 32)" in out and "fan-out histogram: 2: 32" in out
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        (REPO / "workloads" / "model-dist-sample.jsonl").read_text().replace('"bytes":262144', '"bytes":0', 1)
    )
    assert cli.main(["summary", str(bad)]) == 1
    assert "bad.jsonl line 2: field 'bytes': must be > 0" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("text", "value"),
    [("4096", 4096), ("64KiB", 65536), ("1.5GiB", 3 << 29), ("10MB", 10**7), ("2M", 2 << 20), ("7408", 7408)],
)
def test_parse_size(text: str, value: int) -> None:
    assert cli.parse_size(text) == value
    assert cli.parse_size(cli.format_size(value)) == value


@pytest.mark.parametrize("text", ["", "KiB", "1.5", "-3", "3 furlongs"])
def test_parse_size_rejects(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        cli.parse_size(text)


def test_generators_are_lazy() -> None:
    # A 1 TiB model in 1-byte chunks is 2^40 ops: only a lazy generator can hand out the first three.
    huge = model_distribution.ModelDistParams(hosts=H8, size=1 << 40, chunk_bytes=1)
    first = list(itertools.islice(model_distribution.generate(huge).ops, 3))
    assert [o.id for o in first] == [0, 1, 2]
    many_steps = moe.MoEParams(hosts=H8, steps=10**9, tokens_per_host=4)
    assert next(iter(moe.generate(many_steps).ops)).tag == "step0"
