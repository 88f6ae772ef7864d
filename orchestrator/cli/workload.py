"""``workload`` command: generate and summarise traces.

The main ``aidclab`` CLI calls ``add_parser(subparsers)``; each leaf parser sets ``func`` (called with the
parsed namespace, returns an exit code). Run alone as ``python -m orchestrator.cli.workload COMMAND ...``
(a leading ``workload`` is accepted too, so commands copied from ``aidclab`` docs work unchanged).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args, get_origin

from pydantic import BaseModel, ValidationError

from orchestrator.cli.args import HelpFormatter
from orchestrator.units import format_bytes, format_size, parse_size
from orchestrator.workloads import Workload, WorkloadParams
from orchestrator.workloads.trace import TraceError, explain_error, summarize

# Examples name the one entry point users have (`aidclab workload`); the module also runs alone.
PROG = "aidclab workload"

def _host_list(text: str) -> tuple[str, ...]:
    hosts = tuple(h.strip() for h in text.split(","))
    if not text.strip() or any(not h for h in hosts):
        raise argparse.ArgumentTypeError(f"{text!r}: expected comma-separated host names, e.g. h1,h2,h3")
    return hosts


# ---------------------------------------------------------------------------------------------- commands


def add_model_options(p: argparse.ArgumentParser, model: type[BaseModel], skip: Iterable[str] = ()) -> None:
    """One option per field of a generator's parameter model, in field order: the name, type, default,
    choices and help all come from the field (``--tokens-per-host`` for ``tokens_per_host``); sizes take
    units (BYTES metadata), tuples of hosts take a comma-separated list."""
    for name, field in model.model_fields.items():
        if name in skip:
            continue
        extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
        kw: dict[str, Any] = {"help": field.description or name}
        kind = field.annotation
        if kind is bool:
            kw["action"] = "store_true"
        elif get_origin(kind) is Literal:
            kw.update(choices=list(get_args(kind)), default=field.default)
        elif extra.get("unit") == "bytes":
            kw.update(type=parse_size, default=format_size(field.default))
        elif kind in (int, float):
            kw.update(type=kind, default=field.default)
        elif tuple in {get_origin(a) for a in get_args(kind)}:  # tuple[str, ...] | None: host names
            kw["type"] = _host_list
        else:
            kw["type"] = str
        if "metavar" in extra:
            kw["metavar"] = extra["metavar"]
        p.add_argument("--" + name.replace("_", "-"), **kw)


def _add_common(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("hosts and output")
    hosts = g.add_mutually_exclusive_group()
    hosts.add_argument(
        "--hosts",
        type=_host_list,
        metavar="H1,H2,...",
        help="host names in order, as in the lab topology (e.g. h1,h2,...,h8); overrides --hosts-count",
    )
    hosts.add_argument(
        "--hosts-count",
        type=int,
        default=8,
        metavar="N",
        help="use N hosts named gpu1..gpuN (ignored when --hosts is given)",
    )
    g.add_argument(
        "--seed", type=int, default=0, help="random seed; the same seed and options give identical bytes"
    )
    g.add_argument("-o", "--output", metavar="FILE", help="trace file to write (default: stdout)")


def _moe_description() -> str:
    from orchestrator.workloads.moe import BYTES_PER_TOKEN, HIDDEN_SIZE

    return (
        "MoE token dispatch modelled on DeepSeek-V3.\n\n"
        "Routed experts are placed over the hosts in contiguous blocks (256 experts, 8 hosts: 32 each).\n"
        "Every token goes to its top-k routed experts, chosen with node-limited routing: the hosts are\n"
        "scored by the sum of their best ceil(top_k/max_nodes) expert affinities, the token keeps the\n"
        "best max_nodes hosts and picks its top-k experts there. The shared expert lives on every host\n"
        "and causes no traffic. Each step, every host groups its tokens by remote receiver set: one op\n"
        "per set, bytes = tokens x bytes-per-token (multicast when the set has several hosts).\n"
        f"The default bytes-per-token, {BYTES_PER_TOKEN}, is the FP8 hidden state ({HIDDEN_SIZE} B)\n"
        "plus its quantisation scales."
    )


@dataclass(frozen=True)
class Generator:
    """One ``workload`` subcommand: the generator module, its parameter model, and its help texts."""

    command: str
    module: str
    params: str  # the model's class name in the module
    help: str
    description: str | Callable[[], str]
    examples: tuple[str, ...]
    function: str = "generate"  # the module's generator (training.py holds three)


GENERATOR_COMMANDS: tuple[Generator, ...] = (
    Generator(
        "moe", "moe", "MoEParams",
        "MoE token dispatch (DeepSeek-V3: 256 experts, top-8, at most 4 nodes)",
        _moe_description,
        (
            "moe --hosts h1,h2,h3,h4,h5,h6,h7,h8 --steps 2 --tokens-per-host 16 --seed 1 \\\n"
            "      -o workloads/moe-sample.jsonl",
            "moe --hosts-count 16 --skew zipf --zipf-s 1.2 --steps 10 -o moe-zipf.jsonl",
        ),
    ),
    Generator(
        "model-dist", "model_distribution", "ModelDistParams",
        "model distribution: one source sends the model to every other host",
        "Model distribution: the source pushes SIZE bytes of model weights to every other host, in\n"
        "chunks of --chunk-bytes, one chunk every --chunk-interval seconds. Each chunk is one multicast\n"
        "op to all receivers (unicast would send it once per receiver).\n"
        "Deterministic; --seed is recorded.",
        (
            "model-dist --hosts h1,h2,h3,h4,h5,h6,h7,h8 --size 4MiB --chunk-bytes 256KiB \\\n"
            "      -o workloads/model-dist-sample.jsonl",
        ),
    ),
    Generator(
        "checkpoint", "checkpoint", "CheckpointParams",
        "multi-replica checkpoint: each host sends its shard to k storage hosts",
        "Multi-replica checkpoint: every writer sends its shard to --replicas storage hosts at once,\n"
        "one multicast op per chunk. Without --storage every host writes and stores, and replicas go\n"
        "to the next hosts in a seeded ring (each host stores exactly k shards). With --storage those\n"
        "hosts are dedicated storage nodes, the others write, and shards are spread round-robin.\n"
        "A host never stores its own shard.",
        (
            "checkpoint --hosts h1,h2,h3,h4,h5,h6,h7,h8 --shard-bytes 1MiB --replicas 2 \\\n"
            "      --chunk-bytes 256KiB --seed 1 -o workloads/checkpoint-sample.jsonl",
            "checkpoint --hosts-count 8 --storage gpu7,gpu8 --replicas 2 -o ckpt.jsonl",
        ),
    ),
    Generator(
        "all-to-all", "alltoall", "AllToAllParams",
        "all-to-all: every host sends SIZE bytes to every other host",
        "All-to-all: every host sends --size bytes to every other host, chunked. By default the data\n"
        "differs per receiver, so each (source, receiver, chunk) is one unicast op, receivers in ring\n"
        "order from the source. With --identical a source sends the same data to all: one multicast op\n"
        "per source and chunk. Deterministic; --seed is recorded.",
        (
            "all-to-all --hosts h1,h2,h3,h4,h5,h6,h7,h8 --size 512KiB --chunk-bytes 256KiB \\\n"
            "      -o workloads/all-to-all-sample.jsonl",
            "all-to-all --hosts-count 8 --identical -o allgather.jsonl",
        ),
    ),
    Generator(
        "allreduce", "allreduce", "AllreduceParams",
        "AllReduce steps: the hosts reduce SIZE bytes each, one op per step",
        "AllReduce: every --interval seconds all hosts reduce a SIZE-byte int32 array (one op per\n"
        "step; src is the first host, dst the others). Replay it with aidclab replay --mode ina,\n"
        "ring or ps on a lab whose vars define an INA job with exactly these hosts (docs/allreduce.md).\n"
        "Deterministic; --seed is recorded.",
        ("allreduce --hosts w1,w2,w3,w4 --size 16MiB --steps 2 -o ar.jsonl",),
    ),
    Generator(
        "moe-step", "training", "MoEStepParams",
        "a DeepSeek-V3 training step, closed loop: MoE layers forward and backward, then the AllReduce",
        "A closed-loop training step (trace version 2, docs/training.md): per MoE layer every host\n"
        "computes attention, dispatches its tokens to their top-k experts' hosts (node-limited, FP8, one\n"
        "multicast op per host set, as moe), each host runs its experts once all it receives is there and\n"
        "sends the outputs back (BF16, unicast); then the LM head, the backward pass layer by layer\n"
        "(gradients to the experts and back) and one AllReduce of the dense gradients over every host.\n"
        "Every op waits for what it needs (after); compute phases are FLOPs at --gpu-tflops.",
        (
            "moe-step --hosts h1,h2,h3,h4,h5,h6,h7,h8 --layers 4 --tokens-per-host 16 --seed 1 \\\n"
            "      -o moe-step.jsonl",
        ),
        "generate_moe_step",
    ),
    Generator(
        "pipeline-step", "training", "PipelineStepParams",
        "a pipeline-parallel step, closed loop: micro-batches through the stages and back",
        "A closed-loop pipeline-parallel step (trace version 2, docs/training.md): one stage per host,\n"
        "in --hosts order; each micro-batch's activations go forward stage to stage (unicast), its\n"
        "gradients back; every stage runs its forwards and backwards in --schedule order (1f1b:\n"
        "PipeDream-Flush; gpipe: all forwards, then all backwards).",
        ("pipeline-step --hosts h1,h2,h3,h4 --micro-batches 8 --schedule 1f1b -o pipeline.jsonl",),
        "generate_pipeline_step",
    ),
    Generator(
        "decode-step", "training", "DecodeStepParams",
        "an inference decode step, closed loop: one token per sequence through the MoE layers",
        "A closed-loop decode step (trace version 2, docs/training.md): the forward pass of moe-step for\n"
        "one new token per sequence (--tokens-per-host sequences per host), attention over --context\n"
        "cached tokens, then the LM head; compute phases take the roofline of their FLOPs and the weights\n"
        "and KV cache they read (--hbm-tbps). No backward, no AllReduce.",
        ("decode-step --hosts h1,h2,h3,h4,h5,h6,h7,h8 --tokens-per-host 32 -o decode.jsonl",),
        "generate_decode_step",
    ),
)


def _add_generator(sub: Any, gen: Generator) -> None:
    import importlib

    model = getattr(importlib.import_module(f"orchestrator.workloads.{gen.module}"), gen.params)
    description = gen.description() if callable(gen.description) else gen.description
    p = sub.add_parser(
        gen.command,
        help=gen.help,
        formatter_class=HelpFormatter,
        description=description,
        epilog="example:\n" + "\n".join(f"  {PROG} {e}" for e in gen.examples),
    )
    add_model_options(p, model, skip=("hosts", "seed"))
    _add_common(p)
    p.set_defaults(func=_run_generator, _module=gen.module, _function=gen.function, _params=model, _parser=p)


def _add_summary(sub: Any) -> None:
    p = sub.add_parser(
        "summary",
        help="validate a trace and print its totals",
        formatter_class=HelpFormatter,
        description=(
            "Read a trace once (streaming, any size), validate every line and print: op counts by kind,\n"
            "bytes sent (once per op), bytes delivered (x fan-out, what unicast would send), the fan-out\n"
            "histogram and bytes per host. Exit status 1 and a line/field message if the trace is invalid."
        ),
        epilog=(
            f"example:\n  {PROG} summary workloads/moe-sample.jsonl\n  {PROG} summary --json - < trace.jsonl"
        ),
    )
    p.add_argument("trace", metavar="FILE", help="trace file, or - for stdin")
    p.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    p.set_defaults(func=_run_summary, _parser=p)


# ---------------------------------------------------------------------------------------------- running

_COMMON = {
    "hosts",
    "hosts_count",
    "seed",
    "output",
    "func",
    "_module",
    "_function",
    "_params",
    "_parser",
    "workload_command",
}


def _params_from_args(args: argparse.Namespace) -> WorkloadParams:
    model: type[WorkloadParams] = args._params
    hosts = args.hosts or tuple(f"gpu{i}" for i in range(1, args.hosts_count + 1))
    fields = {k: v for k, v in vars(args).items() if k not in _COMMON and k in model.model_fields}
    fields = {k: v for k, v in fields.items() if v is not None}
    try:
        return model(hosts=hosts, seed=args.seed, **fields)
    except ValidationError as e:
        problems = []
        for err in e.errors(include_url=False):
            loc = err["loc"]
            msg = explain_error(err)
            opt = f"--{loc[0]}".replace("_", "-") if loc else ""
            if opt == "--hosts" and not args.hosts:
                opt = "--hosts-count"
            if opt.startswith("--hosts") and err["type"] == "too_short":
                msg = "at least 2 hosts are needed"
            problems.append(f"{opt}: {msg}" if opt else msg)
        args._parser.error("; ".join(problems))
        raise AssertionError("unreachable") from None


def _run_generator(args: argparse.Namespace) -> int:
    import importlib

    params = _params_from_args(args)
    module = importlib.import_module(f"orchestrator.workloads.{args._module}")
    workload: Workload = getattr(module, args._function)(params)
    if args.output:
        summary = _write_atomically(workload, args.output)
        where = f" -> {args.output}"
    else:
        summary = workload.write(sys.stdout)
        sys.stdout.flush()
        where = ""
    line = summary.one_line()
    if "gini" in workload.stats:
        line += f", expert-load Gini {workload.stats['gini']:.3f}"
    print(line + where, file=sys.stderr)
    return 0


def _write_atomically(workload: Workload, path: str) -> Any:
    # A half-written trace would fail validation only at its last line; never leave one behind.
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".trace-", suffix=".jsonl", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
            summary = workload.write(f)
        # mkstemp makes the file private; a trace is ordinary data, so give it the usual umask mode.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    return summary


def _run_summary(args: argparse.Namespace) -> int:
    try:
        s = summarize(sys.stdin if args.trace == "-" else args.trace)
    except TraceError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"error: cannot read {args.trace}: {e.strerror}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(s.to_dict(), indent=2))
        return 0
    print(s.one_line())
    print(f"params: {json.dumps(s.header.params)}")
    print("fan-out histogram: " + ", ".join(f"{k}: {v}" for k, v in s.fanout_hist.items()))
    width = max(len(h) for h in s.header.hosts)
    for h in s.header.hosts:
        print(f"  {h:<{width}}  tx {format_bytes(s.tx_bytes[h]):>10}  rx {format_bytes(s.rx_bytes[h]):>10}")
    return 0


def _add_commands(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="workload_command", required=True, metavar="COMMAND")
    for gen in GENERATOR_COMMANDS:
        _add_generator(sub, gen)
    _add_summary(sub)


_DESCRIPTION = (
    "Generate seeded, deterministic workload traces (aidclab-trace v1, or v2 for the closed-loop\n"
    "steps; JSON Lines, see\n"
    "docs/trace-format.md) and summarise them. Generators print a one-line summary to stderr."
)


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``workload`` command to the main CLI's subparsers."""
    p = subparsers.add_parser(
        "workload",
        help="generate and summarise workload traces",
        description=_DESCRIPTION,
        formatter_class=HelpFormatter,
    )
    _add_commands(p)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list[:1] == ["workload"]:
        args_list = args_list[1:]
    parser = argparse.ArgumentParser(prog=PROG, description=_DESCRIPTION, formatter_class=HelpFormatter)
    _add_commands(parser)
    args = parser.parse_args(args_list)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
