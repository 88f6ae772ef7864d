"""The docs harness on made-up pages: which blocks it runs, which markers and blocks it refuses, what labs a
block needs, and how a page's blocks run (order, working directory, PATH, failures, hangs), with a fake
`aidclab` and a recording stand-in for Docker, so nothing here deploys."""

from __future__ import annotations

import contextlib
import os
import textwrap
import time
from pathlib import Path

import pytest

from tests.docs.blocks import DOCS, LabUse, Problem, ShellBlock, make_default_lab, parse, shell_blocks
from tests.docs.runner import DocRun, project_copy

PAGE = """\
# A page

```sh
echo one > one.txt
```

<!-- not run in CI: needs a 68-node lab -->
```sh
make deploy LAB=superpod
```

<!-- not run in CI yet: issue 42, a reason
     over two lines -->

```console
$ aidclab deploy labs/leaf-spine.clab.yml
deploy leaf-spine [validate] 14 nodes, 16 links
```

```
aidclab exec leaf-spine h1 -- ip -br addr
```

```
bench deploy superpod: 68 nodes, 256 links
```

<!-- not run in CI: above a yaml block -->
```yaml
a: 1
```

<!-- not run in CI -->
```sh
echo no reason
```

````markdown
<!-- not run in CI: a marker shown inside an example -->
```sh
echo never
```
````

- in a list:

  ```bash
  echo in a list
  ```
"""


def examples(tmp_path: Path, text: str, name: str = "page.md") -> list:
    doc = tmp_path / name
    doc.write_text(textwrap.dedent(text))
    return list(parse(doc, lambda _example: None).examples())


def test_every_block_is_run_marked_or_refused(tmp_path: Path) -> None:
    found = [(ex.line, ex.parsed) for ex in examples(tmp_path, PAGE)]
    kinds = [(line, type(p).__name__, getattr(p, "reason", None)) for line, p in found]
    assert kinds == [
        (3, "ShellBlock", None),
        (8, "ShellBlock", "needs a 68-node lab"),
        (15, "ShellBlock", "issue 42, a reason over two lines"),  # a blank line between is fine
        (20, "Problem", None),  # untagged, with a command: tag it
        (28, "Problem", None),  # a marker above no shell block
        (34, "Problem", None),  # a marker without a reason
        (47, "ShellBlock", None),  # in a list item
    ]
    messages = [p.message for _line, p in found if isinstance(p, Problem)]
    assert "tag it ```sh" in messages[0]
    assert "not right above a shell block" in messages[1]
    assert "gives no reason" in messages[2]
    assert found[2][1].script == "aidclab deploy labs/leaf-spine.clab.yml\n"  # console: the `$ ` lines
    assert found[-1][1].source == "echo in a list\n"


def test_a_problem_fails_with_its_page_and_line(tmp_path: Path) -> None:
    untagged = next(ex for ex in examples(tmp_path, PAGE) if isinstance(ex.parsed, Problem))
    with pytest.raises(AssertionError, match=r"page\.md:20: an untagged block"):
        untagged.evaluate()


def test_commands_of_a_block(tmp_path: Path) -> None:
    page = """\
    ```sh
    aidclab split leaf-spine --hosts a,b \\
        --underlay a=10.1.0.1,b=10.1.0.2   # a comment
    aidclab deploy labs/ina-fig1.clab.yml && aidclab configure ina-fig1
    # a line of comment only
    aidclab graph leaf-spine --format dot | dot -Tpng > x.png
    ```
    """
    block = examples(tmp_path, page)[0].parsed
    assert [(c.line, c.text) for c in block.commands] == [
        (2, "aidclab split leaf-spine --hosts a,b --underlay a=10.1.0.1,b=10.1.0.2"),
        (4, "aidclab deploy labs/ina-fig1.clab.yml"),
        (4, "aidclab configure ina-fig1"),
        (6, "aidclab graph leaf-spine --format dot"),
    ]


def test_the_labs_a_block_acts_on(tmp_path: Path) -> None:
    page = """\
    ```sh
    make configure LAB=ina-fig1
    aidclab workload allreduce --hosts w1,w2,w3,w4 --size 1MiB -o ar.jsonl
    ```

    ```sh
    .venv/bin/aidclab replay ina-fig1 ar.jsonl --mode ina
    aidclab link set s5:eth1 loss 0.02
    ```

    ```sh
    make replay MODE=net-bier
    aidclab deploy labs/superpod-frr.clab.yml
    aidclab configure leaf-spine
    ```

    ```sh
    aidclab model run leaf-spine workloads/moe-sample.jsonl
    aidclab plan leaf-spine
    ```

    ```sh
    docker ps
    ```
    """
    blocks = [ex.parsed for ex in examples(tmp_path, page)]
    default = make_default_lab()
    assert [(b.uses, b.needs_docker) for b in blocks] == [
        ((LabUse("ina-fig1", "ina-fig1", "deploys"),), True),
        ((LabUse("ina-fig1", "ina-fig1", "configured"), LabUse("ina-fig1", "ina-fig1", "configured")), True),
        (
            (
                LabUse(default, default, "configured"),
                LabUse("superpod-frr", "labs/superpod-frr.clab.yml", "deploys"),
                LabUse("leaf-spine", "leaf-spine", "deployed"),
            ),
            True,
        ),
        ((), False),  # the model and the plan read files only
        ((), True),
    ]


class RecordingLabs:
    """Stands in for Docker: records what the runner asks, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def ensure_absent(self, lab: str) -> None:
        self.calls.append(("absent", lab))

    def bring_up(self, use: LabUse, workdir: Path, configure: bool, stack: contextlib.ExitStack) -> None:
        assert (workdir / "Makefile").exists()
        self.calls.append(("up", use.name, configure))
        stack.callback(self.calls.append, ("destroyed with the stack", use.name))

    def tear_down(self, lab: str, workdir: Path) -> None:
        self.calls.append(("tear down", lab))


FAKE_AIDCLAB = '#!/bin/sh\necho "aidclab $*" >> "$PWD/aidclab-calls.log"\n'

RUN_PAGE = """\
```sh
echo first > shared.txt
aidclab deploy labs/leaf-spine.clab.yml
```

```sh
test "$(cat shared.txt)" = first
test -f Makefile && test -d labs && test ! -e results
command -v aidclab | grep -q '/.venv/bin/aidclab$'
aidclab exec ina-fig1 w1 -- true
aidclab exec leaf-spine h1 -- true
```

```sh
echo to stdout
echo to stderr >&2
false
echo never
```
"""


def page_run(tmp_path: Path, venv: Path, labs: RecordingLabs) -> DocRun:
    """page.md's run in a copy of the project whose `.venv` is ``venv``; its times kept out of the summary."""
    copy = tmp_path / "copy"
    return DocRun(tmp_path / "page.md", lambda: project_copy(copy, venv=venv), labs, doc_times=[])


@pytest.fixture
def fake_venv(tmp_path: Path) -> Path:
    aidclab = tmp_path / "venv" / "bin" / "aidclab"
    aidclab.parent.mkdir(parents=True)
    aidclab.write_text(FAKE_AIDCLAB)
    aidclab.chmod(0o755)
    return tmp_path / "venv"


def test_a_page_runs_in_order_in_a_copy_of_the_project(tmp_path: Path, fake_venv: Path) -> None:
    blocks = [ex.parsed for ex in examples(tmp_path, RUN_PAGE)]
    labs = RecordingLabs()
    run = page_run(tmp_path, fake_venv, labs)
    assert run.run(blocks[0]) is None
    assert labs.calls == [("absent", "leaf-spine")]  # the page deploys it: it must not be running
    assert run.run(blocks[1]) is None, "same workdir, project root, .venv/bin first on PATH"
    # ina-fig1 is used without a deploy: brought up and configured for the page; leaf-spine is the page's.
    assert labs.calls[1:] == [("up", "ina-fig1", True)]
    calls = (run.workdir / "aidclab-calls.log").read_text().splitlines()
    assert calls == [
        "aidclab deploy labs/leaf-spine.clab.yml",
        "aidclab exec ina-fig1 w1 -- true",
        "aidclab exec leaf-spine h1 -- true",
    ]

    failure = run.run(blocks[2])
    assert failure is not None
    assert failure.startswith(f"{tmp_path / 'page.md'}:14 exited 1")
    assert "echo to stdout\necho to stderr >&2\nfalse\necho never" in failure  # the block
    assert "to stdout" in failure and "to stderr" in failure and "$ false" in failure  # its output
    assert "$ echo never" not in failure  # the first failing command ends it

    run.close()
    assert labs.calls[2:] == [("tear down", "leaf-spine"), ("destroyed with the stack", "ina-fig1")]
    assert [t.block for t in run.times] == [b.name for b in blocks]


def test_a_page_that_needs_a_lab_the_doc_configures_gets_it_deployed_only(
    tmp_path: Path, fake_venv: Path
) -> None:
    page = "```sh\naidclab configure leaf-spine\naidclab replay leaf-spine t.jsonl --mode unicast\n```\n"
    block = examples(tmp_path, page)[0].parsed
    labs = RecordingLabs()
    run = page_run(tmp_path, fake_venv, labs)
    assert run.run(block) is None
    assert labs.calls == [("up", "leaf-spine", False)]  # the page's configure comes first
    run.close()


def test_a_lab_that_cannot_be_made_ready_fails_the_block_naming_it(tmp_path: Path, fake_venv: Path) -> None:
    class Refusing(RecordingLabs):
        def ensure_absent(self, lab: str) -> None:
            raise RuntimeError(f"lab {lab!r} already has 14 container(s)")

    block = examples(tmp_path, "```sh\nmake demo\n```\n")[0].parsed
    run = page_run(tmp_path, fake_venv, Refusing())
    failure = run.run(block)
    assert failure is not None and "(leaf-spine) could not be made ready" in failure
    assert "already has 14 container(s)" in failure


def test_a_hanging_block_is_stopped_with_its_children(tmp_path: Path) -> None:
    page = "```sh\nsleep 300 &\necho $! > child.pid\nwait\n```\n"
    block = examples(tmp_path, page)[0].parsed
    workdir = tmp_path / "work"
    workdir.mkdir()
    run = DocRun(tmp_path / "page.md", lambda: workdir, RecordingLabs(), timeout_s=2, doc_times=[])
    failure = run.run(block)
    assert failure is not None and "timed out after 2 s" in failure
    child = int((workdir / "child.pid").read_text())
    deadline = time.monotonic() + 5
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(child), "the block's background child outlived the timeout"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    state = Path(f"/proc/{pid}/stat").read_text().split()[2]
    return state != "Z"


def test_the_docs_have_blocks_to_run_and_blocks_kept_out() -> None:
    blocks = shell_blocks()
    run = [b for b in blocks if not b.reason]
    assert any(b.doc == DOCS[0] for b in run), "README.md has quick starts CI runs"
    assert len(run) >= 10 and any(b.reason for b in blocks)
    assert all(isinstance(b, ShellBlock) for b in blocks)
