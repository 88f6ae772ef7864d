"""Build every node image locally: no registry is reachable (docs/design.md §5).

1. ``aidclab/base``: a Debian rootfs from mmdebstrap (or debootstrap) piped into ``docker import``.
2. A host-side wheelhouse (``pip download``) of aidcnet's Python dependencies.
2b. The BIER tc programs (``aidcnet/ebpf/*.c``) compiled on the host with Debian's clang, so node images
   need no compiler (:func:`aidcnet.ebpf.build`).
3. ``aidclab/node``: the base plus a venv from the wheelhouse plus aidcnet's source and the eBPF objects.
4. The image of every role that has one (``orchestrator.lab.roles``: our agents' and the interop peers'),
   each from ``node-images/<role>/``, on top of it.

Each step is keyed by a hash of its inputs, and Docker's layer cache does the rest, so a rebuild with
unchanged inputs takes seconds.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

from aidcnet import ebpf
from orchestrator.lab.roles import ROLES
from orchestrator.lab.runtime.docker import docker_client
from orchestrator.paths import CACHE as CACHE_ROOT
from orchestrator.paths import NODE_IMAGES, ROOT
from orchestrator.progress import Phases, console

RECIPES = NODE_IMAGES
CACHE = CACHE_ROOT / "images"
DEBIAN_SUITE = "bookworm"
APT_DIR = Path("/etc/apt")
MIRROR_ENV = "AIDCLAB_DEBIAN_MIRROR"
BASE_IMAGE = "aidclab/base:latest"
NODE_IMAGE = "aidclab/node:latest"
# The roles whose image aidclab builds, in the order it builds them.
ROLE_IMAGES = tuple(role.name for role in ROLES.values() if role.has_image)
INPUTS_LABEL = "aidclab.inputs"


class ImageBuildError(RuntimeError):
    pass


def _digest(*parts: bytes | str) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode() if isinstance(part, str) else part)
        h.update(b"\0")
    return h.hexdigest()[:16]


def base_packages() -> list[str]:
    lines = (RECIPES / "base" / "packages.txt").read_text().splitlines()
    return [ln.strip() for ln in lines if ln.strip() and not ln.lstrip().startswith("#")]


def node_requirements() -> list[str]:
    """The runtime dependencies of the distribution: one list, in pyproject.toml."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return list(project["dependencies"])


def _image_label(client, tag: str, label: str) -> str | None:
    import docker.errors

    try:
        return (client.images.get(tag).labels or {}).get(label)
    except docker.errors.ImageNotFound:
        return None


def image_ids(client, tags: list[str]) -> dict[str, str | None]:
    """tag -> the id of the image it names now (None: no such image)."""
    import docker.errors

    out: dict[str, str | None] = {}
    for tag in tags:
        try:
            out[tag] = client.images.get(tag).id
        except docker.errors.ImageNotFound:
            out[tag] = None
    return out


def remove_replaced(client, before: dict[str, str | None]) -> tuple[int, int]:
    """Remove the images the tags named before a build and name no more (a rebuild leaves them untagged,
    ``<none>``), the last built first so a child goes before its parent. One still used by a container
    (a running lab) stays. Returns (removed, kept)."""
    import docker.errors

    now = image_ids(client, list(before))
    removed = kept = 0
    for tag in reversed(list(before)):
        old = before[tag]
        if old is None or now[tag] == old:
            continue
        try:
            client.images.remove(old)
        except docker.errors.ImageNotFound:
            pass  # pruned already, with the last child removed before it (an untagged parent goes too)
        except docker.errors.APIError:
            kept += 1
            continue
        removed += 1
    return removed, kept


def _run(cmd: list[str], what: str) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise ImageBuildError(f"{what} failed (exit {proc.returncode}): {' '.join(cmd[:3])} ...\n{tail}")


def apt_sources(apt_dir: Path = APT_DIR) -> list[tuple[str, str, list[str]]]:
    """(type, URI, suites) of every entry in the host's APT sources: one-line ``sources.list`` files and
    deb822 ``*.sources`` files alike (disabled files, not ending in .list or .sources, are not read)."""
    entries: list[tuple[str, str, list[str]]] = []
    one_line = [apt_dir / "sources.list", *sorted((apt_dir / "sources.list.d").glob("*.list"))]
    for path in one_line:
        if not path.is_file():
            continue
        for line in path.read_text().splitlines():
            words = line.split("#", 1)[0].split()
            if len(words) >= 3 and words[0] in ("deb", "deb-src"):
                rest = words[1:]
                if rest[0].startswith("["):  # options: [arch=amd64 signed-by=...]
                    while rest and not rest[0].endswith("]"):
                        rest = rest[1:]
                    rest = rest[1:]
                if len(rest) >= 2:
                    entries.append((words[0], rest[0], [rest[1]]))
    for path in sorted((apt_dir / "sources.list.d").glob("*.sources")):
        for stanza in path.read_text().split("\n\n"):
            fields: dict[str, str] = {}
            for line in stanza.splitlines():
                if line.startswith("#") or ":" not in line or line[:1].isspace():
                    continue
                key, _, value = line.partition(":")
                fields[key.strip().lower()] = value.strip()
            if fields.get("enabled", "yes").lower() == "no":
                continue
            for kind in fields.get("types", "").split():
                for uri in fields.get("uris", "").split():
                    entries.append((kind, uri, fields.get("suites", "").split()))
    return entries


def debian_mirror(apt_dir: Path = APT_DIR, environ: dict[str, str] | None = None) -> str:
    """The Debian mirror the node rootfs comes from: ``$AIDCLAB_DEBIAN_MIRROR`` if set, else the host's own
    APT source for DEBIAN_SUITE, so images use whatever mirror or proxy this machine is configured for."""
    env = os.environ if environ is None else environ
    if env.get(MIRROR_ENV):
        return env[MIRROR_ENV]
    for kind, uri, suites in apt_sources(apt_dir):
        if kind == "deb" and DEBIAN_SUITE in suites:
            return uri
    raise ImageBuildError(
        f"no APT source for Debian {DEBIAN_SUITE} in {apt_dir}/sources.list or {apt_dir}/sources.list.d/: "
        f"set {MIRROR_ENV} to the mirror the node images should install from"
    )


def build_base(client, force: bool = False) -> bool:
    """Returns True when it built, False when the cached image already matched its inputs."""
    packages = base_packages()
    mirror = debian_mirror()
    inputs = _digest(DEBIAN_SUITE, mirror, *packages)
    if not force and _image_label(client, BASE_IMAGE, INPUTS_LABEL) == inputs:
        console.print(f"  {BASE_IMAGE} is current (inputs {inputs})")
        return False
    with tempfile.TemporaryDirectory(prefix="aidclab-rootfs-") as tmp:
        tarball = Path(tmp) / "rootfs.tar"
        if shutil.which("mmdebstrap"):
            console.print(f"  mmdebstrap {DEBIAN_SUITE}: {len(packages)} packages (about 30 s)")
            _run(
                [
                    "mmdebstrap",
                    "--variant=apt",
                    "--components=main",
                    "--include=" + ",".join(packages),
                    "--dpkgopt=path-exclude=/usr/share/doc/*",
                    "--dpkgopt=path-exclude=/usr/share/man/*",
                    "--dpkgopt=path-exclude=/usr/share/locale/*",
                    DEBIAN_SUITE,
                    str(tarball),
                    mirror,
                ],
                "mmdebstrap",
            )
        elif shutil.which("debootstrap"):
            console.print(f"  debootstrap {DEBIAN_SUITE} (about 75 s)")
            rootfs = Path(tmp) / "rootfs"
            _run(
                [
                    "debootstrap",
                    "--variant=minbase",
                    "--include=" + ",".join(packages),
                    DEBIAN_SUITE,
                    str(rootfs),
                    mirror,
                ],
                "debootstrap",
            )
            _run(["tar", "-C", str(rootfs), "-cf", str(tarball), "."], "tar rootfs")
        else:
            raise ImageBuildError(
                "neither mmdebstrap nor debootstrap is installed; run `make setup` "
                "(or: apt-get install -y mmdebstrap)"
            )
        console.print(f"  docker import → {BASE_IMAGE}")
        _run(
            [
                "docker",
                "import",
                "--change",
                f"LABEL {INPUTS_LABEL}={inputs}",
                "--change",
                'CMD ["/bin/bash"]',
                str(tarball),
                BASE_IMAGE,
            ],
            "docker import",
        )
    return True


def build_wheelhouse(force: bool = False) -> Path:
    requirements = node_requirements()
    key = _digest(sys.version.split()[0].rsplit(".", 1)[0], *requirements)
    house = CACHE / "wheelhouse" / key
    marker = house / ".complete"
    if marker.exists() and not force:
        console.print(f"  wheelhouse is current ({house.relative_to(ROOT)})")
        return house
    if house.exists():
        shutil.rmtree(house)
    house.mkdir(parents=True)
    (house / "requirements.txt").write_text("\n".join(requirements) + "\n")
    console.print(f"  pip download {len(requirements)} requirements → {house.relative_to(ROOT)}")
    # Same interpreter minor version and platform as Debian 12's python3 (3.11, x86_64/aarch64 glibc).
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--only-binary=:all:",
            "-d",
            str(house),
            "-r",
            str(house / "requirements.txt"),
        ],
        "pip download",
    )
    marker.touch()
    return house


def build_ebpf(force: bool = False) -> Path:
    """Compile the tc programs (keyed by their sources' hash: an unchanged source is reused); returns the
    directory holding the ``.o`` files, which the node image gets whole."""
    cache = CACHE / "ebpf"
    if force and cache.exists():
        shutil.rmtree(cache)
    console.print(f"  clang -target bpf: {', '.join(ebpf.PROGRAMS)} (skipped when current)")
    try:
        objects = ebpf.build(cache)
    except ebpf.EbpfBuildError as exc:
        raise ImageBuildError(str(exc)) from exc
    out = next(iter(objects.values())).parent
    console.print(f"  eBPF objects in {out.relative_to(ROOT)}")
    return out


def _docker_build(client, context: Path, tag: str) -> None:
    console.print(f"  docker build {tag}")
    steps = 0
    for chunk in client.api.build(path=str(context), tag=tag, rm=True, forcerm=True, decode=True):
        if "error" in chunk:
            raise ImageBuildError(f"docker build {tag} (context {context}): {chunk['error'].strip()}")
        line = chunk.get("stream", "")
        if line.startswith("Step "):
            steps += 1


def _node_context(house: Path, objects: Path) -> Path:
    """A build context holding exactly what the node image needs, so unrelated edits keep the cache."""
    ctx = CACHE / "node-context"
    if ctx.exists():
        shutil.rmtree(ctx)
    ctx.mkdir(parents=True)
    shutil.copy(RECIPES / "node" / "Dockerfile", ctx / "Dockerfile")
    shutil.copytree(house, ctx / "wheelhouse", ignore=shutil.ignore_patterns(".complete"))
    shutil.copytree(objects, ctx / "ebpf", ignore=shutil.ignore_patterns(".*"))
    shutil.copytree(
        ROOT / "aidcnet", ctx / "src" / "aidcnet", ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
    )
    return ctx


def build_images(force: bool = False) -> None:
    phases = Phases("images")
    client = docker_client()
    tags = [BASE_IMAGE, NODE_IMAGE, *(ROLES[role].image for role in ROLE_IMAGES)]
    before = image_ids(client, tags)
    with phases.phase("base", BASE_IMAGE):
        build_base(client, force=force)
    with phases.phase("wheelhouse"):
        house = build_wheelhouse(force=force)
    with phases.phase("ebpf"):
        objects = build_ebpf(force=force)
    with phases.phase("node", NODE_IMAGE):
        _docker_build(client, _node_context(house, objects), NODE_IMAGE)
    with phases.phase("roles", ", ".join(ROLE_IMAGES)):
        for role in ROLE_IMAGES:
            _docker_build(client, RECIPES / role, ROLES[role].image)
    with phases.phase("tidy", "the images this build replaced"):
        removed, kept = remove_replaced(client, before)
        if kept:
            console.print(f"  kept {kept} replaced image(s) a container still uses: aidclab destroy, rerun")
    phases.summary(f"{2 + len(ROLE_IMAGES)} images ready, {removed} replaced removed")
