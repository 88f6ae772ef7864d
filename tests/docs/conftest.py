"""The docs' run times per doc at the end of the session: what each doc costs `make test`."""

from __future__ import annotations

from tests.docs.runner import DOC_TIMES


def pytest_terminal_summary(terminalreporter) -> None:  # type: ignore[no-untyped-def]
    if not DOC_TIMES:
        return
    terminalreporter.section("docs: seconds per doc")
    for doc, total, labs, blocks, destroy in DOC_TIMES:
        terminalreporter.write_line(
            f"{doc:28} {total + destroy:7.1f} s: {blocks} block(s) {total:.1f} s (of which bringing up the "
            f"labs it assumes {labs:.1f} s), destroying its labs {destroy:.1f} s"
        )
    terminalreporter.write_line(f"{'all docs':28} {sum(t[1] + t[4] for t in DOC_TIMES):7.1f} s")
