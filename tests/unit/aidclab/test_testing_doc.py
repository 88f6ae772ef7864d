"""docs/testing-your-lab.md shows the complete user test that CI runs: the page's block is the file."""

import re

from orchestrator.paths import ROOT


def test_the_doc_shows_the_example_module_as_it_is():
    doc = (ROOT / "docs" / "testing-your-lab.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", doc, re.S)
    example = (ROOT / "tests" / "e2e" / "test_user_example.py").read_text()
    assert blocks and blocks[0] == example, "copy tests/e2e/test_user_example.py into the doc's first block"
