"""Every shell block of README.md and docs/*.md runs as printed, in order within its doc, and exits 0; a block
that cannot run in CI carries a `<!-- not run in CI: REASON -->` marker and is reported skipped with that
reason (docs/writing-docs.md). Blocks that act on labs are marked e2e: `-m "not e2e"` runs the others.

One doc, one fresh copy of the project and one set of labs: what a doc assumes running (leaf-spine for
docs/bier.md) is deployed and configured before its first block that needs it; what a doc deploys itself
must not be running before; all of it is destroyed after the doc's last block."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sybil import Example

from tests.docs.blocks import DOCS, ShellBlock, parse
from tests.docs.runner import DockerLabs, DocRun, project_copy


def evaluate_block(example: Example) -> str | None:
    block: ShellBlock = example.parsed
    if block.reason:
        pytest.skip(f"{block.name}: {block.reason}")
    run: DocRun = example.namespace["doc_run"]
    return run.run(block)


def _params() -> list:
    params = []
    for doc in DOCS:
        for example in parse(doc, evaluate_block).examples():
            block = example.parsed
            lab = isinstance(block, ShellBlock) and block.needs_docker and not block.reason
            name = f"{doc.relative_to(DOCS[0].parent)}:{example.line}"
            params.append(pytest.param(doc, example, id=name, marks=[pytest.mark.e2e] if lab else []))
    return params


_LABS = DockerLabs()


@pytest.fixture(scope="module")
def doc_run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DocRun]:
    doc: Path = request.param
    tag = doc.stem.replace(".", "-")
    run = DocRun(doc, lambda: project_copy(tmp_path_factory.mktemp(f"docs-{tag}") / "aidclab"), _LABS)
    try:
        yield run
    finally:
        run.close()


@pytest.mark.parametrize(("doc_run", "example"), _params(), indirect=["doc_run"], scope="module")
def test_block_runs_as_printed(doc_run: DocRun, example: Example) -> None:
    example.namespace["doc_run"] = doc_run
    example.evaluate()
