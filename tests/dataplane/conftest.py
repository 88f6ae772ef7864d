"""Fixtures of the eBPF dataplane tests: the compiled programs and a netns lab."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from aidcnet.ebpf import EbpfBuildError, build
from tests.dataplane.netlab import NetLab


@pytest.fixture(scope="session")
def bier_obj(tmp_path_factory) -> Path:
    if os.geteuid() != 0:
        pytest.fail("the eBPF dataplane tests need root (netns, tc, bpffs)")
    for tool, pkg in (("bpftool", "bpftool"), ("tc", "iproute2"), ("nsenter", "util-linux")):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} not found: apt-get install -y {pkg} (or run `make setup`)")
    if not os.path.ismount("/sys/fs/bpf"):
        Path("/sys/fs/bpf").mkdir(parents=True, exist_ok=True)
        os.system("mount -t bpf bpf /sys/fs/bpf")
    try:
        return build(tmp_path_factory.mktemp("ebpf"))["bier"]
    except EbpfBuildError as exc:
        pytest.fail(str(exc))


@pytest.fixture
def lab(request) -> Iterator[NetLab]:
    lab = NetLab(getattr(request, "param", 4))
    yield lab
    lab.close()
