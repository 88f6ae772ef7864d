"""Compile a tc program with Debian's clang, once per content: the object's name carries a hash of the
source, the compiler's version and the flags, so a changed source or compiler builds anew and an
unchanged one is reused (the host attaches the object into nodes' namespaces with its own ``tc``)."""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

INSTALL = "apt-get install -y clang llvm libbpf-dev (scripts/setup.sh does it)"


class BuildError(RuntimeError):
    pass


def compile_bpf(source: Path, cache_dir: Path | None = None) -> Path:
    """``clang -O2 -g -target bpf`` ``source`` into ``cache_dir`` (default ``~/.cache/aidclab/ebpf``)."""
    clang = shutil.which("clang")
    if clang is None:
        raise BuildError(f"clang is missing, needed to build {source.name}: {INSTALL}")
    flags = ["-O2", "-g", "-target", "bpf", "-Wall", "-Werror"]
    # <linux/bpf.h> pulls <asm/types.h>, which Debian keeps under the multiarch include directory.
    multiarch = Path("/usr/include") / f"{platform.machine()}-linux-gnu"
    if multiarch.is_dir():
        flags.append(f"-I{multiarch}")
    version = subprocess.run([clang, "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    key = hashlib.sha256("\0".join([source.read_text(), version, *flags]).encode()).hexdigest()[:16]
    cache = cache_dir or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "aidclab" / "ebpf"
    out = cache / f"{source.stem}-{key}.o"
    if out.exists():
        return out
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=cache, suffix=".o.tmp", delete=False) as tmp:
        partial = Path(tmp.name)
    try:
        cmd = [clang, *flags, "-c", str(source), "-o", str(partial)]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            hint = " (bpf/bpf_helpers.h missing? " + INSTALL + ")" if "bpf_helpers.h" in done.stderr else ""
            raise BuildError(f"clang failed on {source}{hint}:\n{done.stderr.strip()}")
        partial.replace(out)  # atomic: a concurrent build of the same key yields the same bytes
    finally:
        partial.unlink(missing_ok=True)
    return out


def link_fault_object(cache_dir: Path | None = None) -> Path:
    return compile_bpf(Path(__file__).with_name("link_fault.c"), cache_dir)
