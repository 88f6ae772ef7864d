"""The node rootfs comes from the host's own APT sources (or $AIDCLAB_DEBIAN_MIRROR), never from a mirror
written in the code. Hosts here use the reserved .invalid domain."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.lab.images import ImageBuildError, apt_sources, debian_mirror


def apt_dir(tmp_path: Path, sources_list: str = "", **parts: str) -> Path:
    (tmp_path / "sources.list.d").mkdir()
    if sources_list:
        (tmp_path / "sources.list").write_text(sources_list)
    for name, text in parts.items():
        (tmp_path / "sources.list.d" / name.replace("_", ".")).write_text(text)
    return tmp_path


def test_deb822_sources_pick_the_suite_not_security(tmp_path: Path) -> None:
    d = apt_dir(
        tmp_path,
        debian_sources=(
            "Types: deb\n# a comment\nURIs: http://security.invalid/debian-security\n"
            "Suites: bookworm-security\nComponents: main\n\n"
            "Types: deb deb-src\nURIs: http://apt.invalid/debian\nSuites: bookworm bookworm-updates\n"
        ),
    )
    assert debian_mirror(d, environ={}) == "http://apt.invalid/debian"


def test_one_line_sources_with_options_and_disabled_files(tmp_path: Path) -> None:
    d = apt_dir(
        tmp_path,
        "# deb http://commented.invalid/debian bookworm main\n"
        "deb [arch=amd64 signed-by=/k.gpg] http://proxy.invalid:3142/debian bookworm main\n",
        other_list_disabled="deb http://disabled.invalid/debian bookworm main\n",
    )
    assert apt_sources(d) == [("deb", "http://proxy.invalid:3142/debian", ["bookworm"])]
    assert debian_mirror(d, environ={}) == "http://proxy.invalid:3142/debian"


def test_a_disabled_stanza_is_skipped(tmp_path: Path) -> None:
    d = apt_dir(
        tmp_path,
        a_sources="Enabled: no\nTypes: deb\nURIs: http://off.invalid/debian\nSuites: bookworm\n",
        b_sources="Types: deb\nURIs: http://on.invalid/debian\nSuites: bookworm\n",
    )
    assert debian_mirror(d, environ={}) == "http://on.invalid/debian"


def test_the_environment_wins_and_nothing_found_says_what_to_set(tmp_path: Path) -> None:
    d = apt_dir(tmp_path, "deb http://apt.invalid/debian trixie main\n")
    assert debian_mirror(d, environ={"AIDCLAB_DEBIAN_MIRROR": "http://own.invalid/debian"}) == (
        "http://own.invalid/debian"
    )
    with pytest.raises(ImageBuildError, match="AIDCLAB_DEBIAN_MIRROR"):
        debian_mirror(d, environ={})
