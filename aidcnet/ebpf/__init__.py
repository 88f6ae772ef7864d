"""The tc/eBPF programs of the BIER fast path (C, compiled with Debian's clang at image build time).

``bier.c`` is the BFR forwarding program (RFC 8279 §6.5 over RFC 8296 MPLS-in-UDP), ``bier.h`` the map
layout it shares with :mod:`aidcnet.agent.bier_ebpf`.  :func:`build` is the one place that compiles
them: the image build (orchestrator/images.py) and the dataplane tests both call it.  No object file is
kept in the repository.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sysconfig
from pathlib import Path

SRC = Path(__file__).resolve().parent
PROGRAMS = ("bier",)
OBJECT_DIR = Path("/opt/aidcnet/ebpf")
"""Where node images keep the compiled objects."""

INSTALL_HINT = "apt-get install -y clang llvm libbpf-dev linux-libc-dev (or run `make setup`)"


class EbpfBuildError(RuntimeError):
    pass


def sources() -> list[Path]:
    return sorted([*SRC.glob("*.c"), *SRC.glob("*.h")])


def source_digest() -> str:
    """Hash of every C source and header: the image build step's key."""
    h = hashlib.sha256()
    for path in sources():
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def _cflags(src_dir: Path = SRC) -> list[str]:
    flags = ["-O2", "-g", "-target", "bpf", "-Wall", "-Werror", "-I", str(src_dir)]
    # -target bpf does not search the multiarch directory where Debian keeps <asm/types.h>.
    multiarch = sysconfig.get_config_var("MULTIARCH")
    if multiarch and Path(f"/usr/include/{multiarch}").is_dir():
        flags += ["-I", f"/usr/include/{multiarch}"]
    return flags


def build(out_dir: Path, clang: str = "clang", src_dir: Path = SRC) -> dict[str, Path]:
    """Compile every program into ``out_dir`` (``<name>.o`` with BTF); returns ``{name: path}``.
    ``src_dir``: another copy of the sources (a bench compares an older revision's programs).

    Raises EbpfBuildError with the install command when clang or the headers are missing."""
    if shutil.which(clang) is None:
        raise EbpfBuildError(f"{clang} not found: the BIER tc programs need it. Install: {INSTALL_HINT}")
    if not Path("/usr/include/bpf/bpf_helpers.h").exists():
        raise EbpfBuildError(f"libbpf headers (bpf/bpf_helpers.h) not found. Install: {INSTALL_HINT}")
    out_dir.mkdir(parents=True, exist_ok=True)
    built = {}
    for name in PROGRAMS:
        src = src_dir / f"{name}.c"
        if not src.exists():
            continue  # an older revision without this program
        obj = out_dir / f"{name}.o"
        proc = subprocess.run(
            [clang, *_cflags(src_dir), "-c", str(src), "-o", str(obj)], capture_output=True, text=True
        )
        if proc.returncode != 0:
            raise EbpfBuildError(f"clang failed on {src}:\n{proc.stderr.strip()[-3000:]}")
        built[name] = obj
    return built
