"""The tc (clsact, direct-action) eBPF programs in C, compiled with Debian's clang, and their Python sides.

* ``bier.c``: the BFR forwarding program (RFC 8279 §6.5 over RFC 8296 MPLS-in-UDP); ``bier.h`` is the
  map layout it shares with :mod:`aidcnet.agent.bier.ebpf`. The node agent loads it.
* ``link_fault.c``: Gilbert-Elliott loss at a link end (:mod:`aidcnet.ebpf.link_fault`); the host
  attaches it into the nodes' namespaces with its own ``tc`` (orchestrator/lab/shaping.py).
* ``delay_relay.c``: hands a delayed link's packets to the host's delay relay and takes them back when
  due (orchestrator/lab/relay.py). Host only: :data:`PROGRAMS` (what node images carry) leaves it out,
  the relay builds it with ``build(programs=(RELAY_PROGRAM,))``.

:func:`build` is the one place that compiles them: the image build (orchestrator/lab/images.py, which
copies the objects into the node image at :data:`OBJECT_DIR`), the host's link shaping and the tests
all call it. Objects are keyed by a hash of the sources, the compiler's version and the flags, so a
changed source or compiler builds anew and an unchanged one is reused. No object file is kept in the
repository.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sysconfig
import tempfile
from pathlib import Path

SRC = Path(__file__).resolve().parent
PROGRAMS = ("bier", "link_fault")
RELAY_PROGRAM = "delay_relay"
OBJECT_DIR = Path("/opt/aidcnet/ebpf")
"""Where node images keep the compiled objects."""

INSTALL_HINT = "apt-get install -y clang llvm libbpf-dev linux-libc-dev (or run scripts/setup.sh)"


class EbpfBuildError(RuntimeError):
    pass


def host_cache() -> Path:
    """Where the host keeps its objects when the caller names no directory."""
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "aidclab" / "ebpf"


def sources(src: Path = SRC) -> list[Path]:
    return sorted([*src.glob("*.c"), *src.glob("*.h")])


def _cflags() -> list[str]:
    flags = ["-O2", "-g", "-target", "bpf", "-Wall", "-Werror"]
    # -target bpf does not search the multiarch directory where Debian keeps <asm/types.h>.
    multiarch = sysconfig.get_config_var("MULTIARCH")
    if multiarch and Path(f"/usr/include/{multiarch}").is_dir():
        flags += ["-I", f"/usr/include/{multiarch}"]
    return flags


def _clang(clang: str) -> str:
    path = shutil.which(clang)
    if path is None:
        raise EbpfBuildError(f"{clang} not found: the tc programs need it. Install: {INSTALL_HINT}")
    if not Path("/usr/include/bpf/bpf_helpers.h").exists():
        raise EbpfBuildError(f"libbpf headers (bpf/bpf_helpers.h) not found. Install: {INSTALL_HINT}")
    return path


def build_key(src: Path = SRC, clang: str = "clang") -> str:
    """Hash of every C source and header, the compiler's version and the flags: an object directory's name."""
    version = subprocess.run([_clang(clang), "--version"], capture_output=True, text=True).stdout
    h = hashlib.sha256()
    for part in [version.splitlines()[0] if version else clang, *_cflags()]:
        h.update(part.encode() + b"\0")
    for path in sources(src):
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def _compile(clang: str, src: Path, name: str, obj: Path) -> None:
    # Into a temporary name, then renamed: a concurrent build of the same key yields the same bytes.
    with tempfile.NamedTemporaryFile(dir=obj.parent, prefix=f".{name}-", suffix=".o", delete=False) as tmp:
        partial = Path(tmp.name)
    try:
        proc = subprocess.run(
            [clang, *_cflags(), "-I", str(src), "-c", str(src / f"{name}.c"), "-o", str(partial)],
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            raise EbpfBuildError(f"clang failed on {src / f'{name}.c'}:\n{proc.stderr.strip()[-3000:]}")
        partial.replace(obj)
    finally:
        partial.unlink(missing_ok=True)


def build(
    cache: Path | None = None, *, src: Path = SRC, programs: tuple[str, ...] = PROGRAMS, clang: str = "clang"
) -> dict[str, Path]:
    """Compile ``programs`` into ``cache/<build_key>/<name>.o`` (with BTF), each only when that object is
    not there yet; returns ``{name: path}``. ``cache`` defaults to :func:`host_cache`.

    Raises EbpfBuildError with the install command when clang or the headers are missing."""
    clang = _clang(clang)
    out_dir = (cache or host_cache()) / build_key(src, clang)
    out_dir.mkdir(parents=True, exist_ok=True)
    built = {}
    for name in programs:
        obj = out_dir / f"{name}.o"
        if not obj.exists():
            _compile(clang, src, name, obj)
        built[name] = obj
    return built
