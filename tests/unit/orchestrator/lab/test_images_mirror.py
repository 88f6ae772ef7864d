"""The node rootfs comes from the host's own APT sources (or $AIDCLAB_DEBIAN_MIRROR), never from a mirror
written in the code. The sources here are local file: mirrors made under the test's temporary directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.lab.images import ImageBuildError, apt_sources, debian_mirror


def mirror(tmp_path: Path, name: str) -> str:
    """A local mirror's URI (file:///...): no host at all."""
    return (tmp_path / "mirrors" / name).as_uri()


def apt_dir(tmp_path: Path, sources_list: str = "", **parts: str) -> Path:
    d = tmp_path / "apt"
    (d / "sources.list.d").mkdir(parents=True)
    if sources_list:
        (d / "sources.list").write_text(sources_list)
    for name, text in parts.items():
        (d / "sources.list.d" / name.replace("_", ".")).write_text(text)
    return d


def test_deb822_sources_pick_the_suite_not_security(tmp_path: Path) -> None:
    security, main = mirror(tmp_path, "debian-security"), mirror(tmp_path, "debian")
    d = apt_dir(
        tmp_path,
        debian_sources=(
            f"Types: deb\n# a comment\nURIs: {security}\nSuites: bookworm-security\nComponents: main\n\n"
            f"Types: deb deb-src\nURIs: {main}\nSuites: bookworm bookworm-updates\n"
        ),
    )
    assert debian_mirror(d, environ={}) == main


def test_one_line_sources_with_options_and_disabled_files(tmp_path: Path) -> None:
    proxied, commented, disabled = (mirror(tmp_path, n) for n in ("proxied", "commented", "disabled"))
    d = apt_dir(
        tmp_path,
        f"# deb {commented} bookworm main\ndeb [arch=amd64 signed-by=/k.gpg] {proxied} bookworm main\n",
        other_list_disabled=f"deb {disabled} bookworm main\n",
    )
    assert apt_sources(d) == [("deb", proxied, ["bookworm"])]
    assert debian_mirror(d, environ={}) == proxied


def test_a_disabled_stanza_is_skipped(tmp_path: Path) -> None:
    off, on = mirror(tmp_path, "off"), mirror(tmp_path, "on")
    d = apt_dir(
        tmp_path,
        a_sources=f"Enabled: no\nTypes: deb\nURIs: {off}\nSuites: bookworm\n",
        b_sources=f"Types: deb\nURIs: {on}\nSuites: bookworm\n",
    )
    assert debian_mirror(d, environ={}) == on


def test_the_environment_wins_and_nothing_found_says_what_to_set(tmp_path: Path) -> None:
    d = apt_dir(tmp_path, f"deb {mirror(tmp_path, 'trixie-only')} trixie main\n")
    own = mirror(tmp_path, "own")
    assert debian_mirror(d, environ={"AIDCLAB_DEBIAN_MIRROR": own}) == own
    with pytest.raises(ImageBuildError, match="AIDCLAB_DEBIAN_MIRROR"):
        debian_mirror(d, environ={})
