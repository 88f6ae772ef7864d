"""aidclab's pytest plugin: your own tests against a real lab, deployed once, configured, always destroyed.

Installing aidclab registers this module as a pytest plugin (entry point ``aidclab.pytest``); with plugin
autoloading off, enable it with ``-p aidclab.pytest``. Loading it deploys nothing: a lab comes up only when a
test asks for a fixture made by :func:`lab_fixture`::

    from aidclab.pytest import lab_fixture

    lab = lab_fixture("leaf-spine")                # deployed and configured once for this module

    def test_leaves_forward(lab):
        assert "UP" in lab.exec("leaf1", "ip -br link show eth1")

The handle (:class:`Lab`) runs the same code as the ``aidclab`` commands: deploy, configure (Ansible, as
``aidclab configure``), ``link set``, ``replay``, ``capture``, and ``exec``/``ctl`` inside a node. The lab is
destroyed when its scope ends, also when a test fails, deploy or configure fails half way, or the run is
interrupted with Ctrl-C or SIGTERM. A lab that is already running under the same name is refused, never
touched. docs/testing-your-lab.md walks through a complete test.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

if TYPE_CHECKING:
    from orchestrator.configure.plan.schema import LabPlan
    from orchestrator.lab.runtime.docker import DockerRuntime
    from orchestrator.lab.topology import Topology
    from orchestrator.run.driver import RunOutcome

SCOPES = ("session", "package", "module", "class", "function")
# tcpdump says this on stderr once the capture is armed; packets sent before it are not in the file.
_LISTENING = "listening on"
_CAPTURED = re.compile(r"(\d+) packets? captured")


class LabError(RuntimeError):
    """A lab the plugin cannot deploy, reach or destroy; the message names the lab and what to do."""


class CommandFailed(AssertionError):
    """A command in a node exited non-zero (an AssertionError, so pytest reports it as a test failure)."""

    def __init__(self, node: str, cmd: str | Sequence[str], code: int, output: str):
        shown = cmd if isinstance(cmd, str) else " ".join(cmd)
        super().__init__(f"{node}: `{shown}` exited {code}:\n{output.rstrip()}")
        self.node, self.code, self.output = node, code, output


class Output(str):
    """A command's combined output, with its exit status as ``.code`` (0 unless ``check=False``)."""

    code: int

    def __new__(cls, text: str, code: int) -> Output:
        out = super().__new__(cls, text)
        out.code = code
        return out


@contextlib.contextmanager
def working_dir(path: Path) -> Iterator[None]:
    """The orchestrator finds a lab's dir (``clab-<lab>/``) in the working directory, as the CLI does: each
    lab operation runs from the lab's own work dir, so labs of different scopes never see each other's."""
    old = Path.cwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)


def topology_file(
    lab: str | Path,
    workdir: Path,
    name: str | None = None,
    vars: Mapping[str, Any] | None = None,
    edit: Callable[[dict], None] | None = None,
) -> Path:
    """The topology to deploy. Unchanged (no ``name``, ``vars`` or ``edit``): the lab's own file, with its
    own vars file beside it. Otherwise a copy in ``workdir`` named ``name`` (default: the lab's name), its
    topology changed by ``edit`` and its vars ``vars`` (``{}``: every default), or the lab's own vars file
    when ``vars`` is None."""
    from orchestrator.configure.plan import vars_path_for
    from orchestrator.lab.topology import load_topology, resolve_lab

    source = resolve_lab(str(lab))
    original = load_topology(source)  # TopologyError names the file and what is wrong
    if name is None and vars is None and edit is None:
        return source
    doc = yaml.safe_load(source.read_text())
    doc["name"] = name or original.name
    if edit is not None:
        edit(doc)
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / f"{doc['name']}.clab.yml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    own_vars = vars_path_for(original)
    if vars is not None:
        (workdir / f"{doc['name']}.vars.yml").write_text(yaml.safe_dump(dict(vars), sort_keys=False))
    elif own_vars.exists():
        (workdir / f"{doc['name']}.vars.yml").write_text(own_vars.read_text())
    return path


def ina_switches(doc: dict) -> None:
    """An ``edit`` (:func:`topology_file`): every BFR of the lab becomes an INA switch, a BFR that also
    aggregates AllReduce chunks, so the lab can hold INA jobs (docs/allreduce.md). Nothing else changes."""
    from aidcnet.roles import Role
    from orchestrator.lab.roles import role_named

    bfr, ina = role_named(Role.BFR).image, role_named(Role.INA_SWITCH).image
    topology = doc["topology"]
    for node in [*topology.get("groups", {}).values(), *topology["nodes"].values()]:
        if node and node.get("image") == bfr:
            node["image"] = ina


def ina_job_over_every_gpu(lab: str | Path, job: int = 1, root: str | None = None) -> dict[str, Any]:
    """An ``ina.jobs`` entry (docs/allreduce.md) over every GPU host of a two-tier lab, in topology order:
    each leaf aggregates the hosts on its ports, ``root`` (default: the first switch with no host, a spine)
    the leaves' partials. Deploy it with :func:`ina_switches`. Raises LabError when a host hangs off no
    switch or the lab has no switch without hosts to be the root."""
    from aidcnet.roles import Role
    from orchestrator.lab.roles import role_of
    from orchestrator.lab.topology import load_topology, resolve_lab

    topo = load_topology(resolve_lab(str(lab)))
    hosts = [n for n, node in topo.nodes.items() if role_of(node).name == Role.GPU_HOST]
    switches = [n for n, node in topo.nodes.items() if role_of(node).bfr and n not in hosts]
    abm: dict[str, list[str]] = {}
    for host in hosts:
        ends = [there.node for _link, _here, there in topo.links_of(host) if there.node in switches]
        if not ends:
            raise LabError(
                f"lab {topo.name}: GPU host {host} has no link to a switch, so no leaf aggregates it"
            )
        abm.setdefault(ends[0], []).append(host)
    spines = [s for s in switches if s not in abm]
    if root is None and not spines:
        raise LabError(
            f"lab {topo.name}: every switch has hosts, so none is a spine to root the job; name root="
        )
    root = root or spines[0]
    return {"job": job, "workers": hosts, "root": root, "abm": {**abm, root: hosts}}


@dataclass
class Capture:
    """A pcap being (or having been) written by :meth:`Lab.capture`; ``packets`` is tcpdump's own count,
    set when the capture has stopped."""

    endpoint: str
    path: Path
    packets: int | None = None
    stderr: list[str] = field(default_factory=list)

    def lines(self, expression: str = "") -> list[str]:
        """The capture as the host's tcpdump prints it (``-n``; a packet may take more than one line),
        optionally filtered by a BPF expression such as ``udp dst port 6635`` (BIER in MPLS-in-UDP)."""
        return self._read("-n", expression).splitlines()

    def count(self, expression: str = "") -> int:
        """How many captured packets match a BPF expression (all of them without one)."""
        out = self._read("--count", expression).strip()
        match = re.fullmatch(r"(\d+) packets?", out)
        if match is None:
            raise LabError(f"tcpdump --count -r {self.path} printed {out!r}, not 'N packets'")
        return int(match.group(1))

    def _read(self, option: str, expression: str) -> str:
        cmd = ["tcpdump", option, "-r", str(self.path), *expression.split()]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise LabError(f"{' '.join(cmd)} failed: {proc.stderr.strip()}")
        return proc.stdout


@dataclass
class Lab:
    """A deployed lab, as a test sees it. Every method runs what the matching ``aidclab`` command runs."""

    topo: Topology
    workdir: Path
    runtime: DockerRuntime
    # Relative paths a test gives (traces) are taken from here: pytest's rootdir for lab_fixture.
    root: Path = field(default_factory=Path.cwd)
    _captures: int = 0

    @property
    def name(self) -> str:
        return self.topo.name

    @property
    def lab_dir(self) -> Path:
        """``clab-<lab>/``: ansible-inventory.yml, topology-data.json, plan.yml, fabric.json."""
        return self.workdir / self.topo.lab_dir_name

    @property
    def plan(self) -> LabPlan:
        """The plan the lab was configured with (addresses, ASNs, BFR-ids, BIFTs), read from the lab dir."""
        from orchestrator.experiment.session import load_plan

        with working_dir(self.workdir):
            return load_plan(self.topo)

    def container(self, node: str) -> str:
        if node not in self.topo.nodes:
            raise LabError(f"lab {self.name} has no node {node!r}; its nodes: {', '.join(self.topo.nodes)}")
        return self.topo.container_name(node)

    def exec(self, node: str, cmd: str | Sequence[str], check: bool = True) -> Output:
        """Run ``cmd`` in ``node`` (a string goes through ``sh -c``); returns its output, with the exit
        status as ``.code``. A non-zero exit fails the test unless ``check=False``."""
        code, out = self.runtime.exec(self.container(node), cmd if isinstance(cmd, str) else list(cmd))
        if check and code != 0:
            raise CommandFailed(node, cmd, code, out)
        return Output(out, code)

    def ctl(self, node: str, *args: str, check: bool = True) -> Any:
        """``aidcnet ctl ARGS`` in ``node``: the parsed JSON when it prints JSON (``health``, ``show
        counters``, ``show bgp --json``), its text otherwise."""
        out = self.exec(node, ["aidcnet", "ctl", *args], check=check)
        try:
            return json.loads(out)
        except ValueError:
            return out

    def agent(self, node: str, timeout: float = 30.0):  # -> aidcnet.agent.client.AgentClient
        """The node's agent through its control socket (typed: ``.counters()``, ``.bift()``, ...)."""
        return self.runtime.agent(self.container(node), node, timeout=timeout)

    def configure(self, **kwargs: Any):  # -> orchestrator.configure.ansible.RunReport
        """Configure again (``aidclab configure``), e.g. after a test changed the lab's vars file
        (``topo.path.parent / f"{lab.name}.vars.yml"``). Raises ConfigureError naming the failing task."""
        from orchestrator.configure.ansible import configure

        with working_dir(self.workdir):
            return configure(self.topo, **kwargs)

    def link_set(self, endpoint: str, action: str, *value: str, one_way: bool = False) -> list[str]:
        """``aidclab link set NODE:IF ACTION [VALUE ...]``: ``down``, ``up``, ``bandwidth 400G``, ``loss
        0.02``, ``loss 5% burst 4``, ``loss gilbert P R``; returns the lines the command prints."""
        from orchestrator.lab.linkset import link_set

        return link_set(self.runtime, self.lab_dir, endpoint, action, list(value), one_way=one_way)

    @contextlib.contextmanager
    def at_scale(self, scale: int) -> Iterator[None]:
        """The lab at time scale 1:``scale`` for the body, links, delays and agents together, then back at
        its own (as ``replay --confirm`` moves it): a short run is faithful only at a scale where the links,
        not our software, set its pace (docs/time-and-fidelity.md)."""
        from aidcnet.timescale import TimeScale
        from orchestrator.experiment.session import LabSession
        from orchestrator.lab import rescale

        with working_dir(self.workdir):
            session = LabSession.open(self.topo, self.runtime)
        with rescale.at_scale(self.lab_dir, self.topo.container_name, session.agents, TimeScale(scale)):
            yield

    def wait_routes(self, timeout: float = 180.0) -> None:
        """Until every node's kernel has a route to every destination its plan routes to: a BGP UPDATE
        takes each hop's delay x time scale of wall time on a delayed lab (docs/delay.md). LabError naming
        what is still missing after ``timeout`` s."""
        from orchestrator.lab.convergence import wait_for_routes

        missing = wait_for_routes(self.plan, self.container, timeout)
        if missing:
            shown = "; ".join(f"{node}: {', '.join(p[:3])}" for node, p in sorted(missing.items())[:4])
            raise LabError(f"lab {self.name}: routes still missing after {timeout:g} s ({shown})")

    def replay(
        self,
        trace: str | Path,
        mode: str,
        results_dir: str | Path | None = None,
        confirm: bool = False,
        **options: Any,
    ) -> RunOutcome:
        """``aidclab replay``: the run's outcome (``.ok``, ``.missing``, ``.result.metrics``, ``.run_dir``).
        ``mode`` is a mode's name (``aidcnet.modes.Mode``); ``options`` are RunOptions fields (drain_s,
        timeout_s, gap_us, qps, ps_host, allreduce: a training step's AllReduce mode, ...); a relative
        ``trace`` is taken from :attr:`root`; runs go to ``results/`` in the lab's work dir unless
        ``results_dir`` says where. ``confirm``: as ``replay --confirm``, the same trace at twice the scale
        too; the run's verdict says whether it held."""
        from aidcnet.modes import Mode
        from orchestrator.experiment.modes.base import RunOptions
        from orchestrator.run.driver import confirm as confirm_at_a_second_scale
        from orchestrator.run.driver import run_experiment

        try:
            mode = Mode(mode)  # checked here, where the name comes in, as the CLI checks --mode
            if options.get("allreduce") is not None:  # a step's AllReduce mode, as --allreduce
                options["allreduce"] = Mode(options["allreduce"])
        except ValueError as exc:
            raise LabError(f"{exc}; a mode is one of {', '.join(Mode)}") from None

        trace = (self.root / trace).resolve()
        results = Path(results_dir).resolve() if results_dir else self.workdir / "results"
        from orchestrator.run.prediction import step_predictor

        run_options = RunOptions(**{"predict_step": step_predictor, **options})
        with working_dir(self.workdir):
            outcome = run_experiment(
                self.topo, trace, mode, run_options, runtime=self.runtime, results_dir=results
            )
            if confirm and outcome.ok:
                confirm_at_a_second_scale(
                    self.topo, trace, mode, outcome, run_options, runtime=self.runtime, results_dir=results
                )
            return outcome

    @contextlib.contextmanager
    def capture(
        self,
        endpoint: str,
        count: int | None = None,
        path: str | Path | None = None,
        timeout: float = 10.0,
        settle: float = 0.5,
    ) -> Iterator[Capture]:
        """``aidclab capture NODE:IF -w FILE`` around a block: armed before the block runs, stopped
        ``settle`` s after it (packets still on their way get in), or after ``count`` packets (waiting
        up to ``timeout`` s for them). The pcap lands in the lab's work dir unless ``path`` says where."""
        from orchestrator.lab.capture import capture_target, tcpdump_command
        from orchestrator.lab.linkset import LinkSetError
        from orchestrator.lab.shaping import node_netns

        try:
            container, interface = capture_target(self.lab_dir, endpoint)
        except LinkSetError as exc:
            raise LabError(str(exc)) from None
        self._captures += 1
        pcap = Path(path) if path else self.workdir / f"{endpoint.replace(':', '-')}-{self._captures}.pcap"
        cap = Capture(endpoint, pcap)
        cmd = tcpdump_command(node_netns(container), interface, count, str(pcap))
        proc, reader = _start_tcpdump(cmd, cap, timeout)
        try:
            yield cap
        finally:
            _stop_tcpdump(proc, reader, cap, wait=timeout if count else settle)


def _start_tcpdump(
    cmd: list[str], cap: Capture, timeout: float
) -> tuple[subprocess.Popen[str], threading.Thread]:
    """tcpdump started and armed (it said it is listening), its stderr kept in ``cap.stderr``."""
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    except FileNotFoundError as exc:
        raise LabError(f"{exc.filename} is not installed on this host (apt-get install tcpdump)") from None
    settled = threading.Event()  # tcpdump said it listens, or ended without saying so
    listening: list[bool] = []

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            cap.stderr.append(line.rstrip())
            if _LISTENING in line and not listening:
                listening.append(True)
                settled.set()
        settled.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    settled.wait(timeout)
    if not listening:
        proc.kill()
        proc.wait()
        reader.join(5)
        raise LabError(f"capture on {cap.endpoint} did not start: {' '.join(cmd)}: " + " / ".join(cap.stderr))
    return proc, reader


def _stop_tcpdump(proc: subprocess.Popen[str], reader: threading.Thread, cap: Capture, wait: float) -> None:
    """Give tcpdump ``wait`` s (a counted capture ends by itself), then stop it as Ctrl-C would: it
    flushes the file and prints its count."""
    import signal

    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(wait)
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    reader.join(5)  # it reads to tcpdump's last line (the count)
    for line in cap.stderr:
        match = _CAPTURED.search(line)
        if match:
            cap.packets = int(match.group(1))


@contextlib.contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    """While a lab is up, SIGTERM (a CI job cancelled, ``timeout``) stops the run as Ctrl-C does, so the lab
    is destroyed on the way out instead of left running. Only the main thread may set signal handlers."""
    import signal

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    owner = os.getpid()

    def interrupt(signum: int, _frame: object) -> None:
        if os.getpid() != owner:
            # A child forked while the lab is up (pyroute2 forks one per namespace handle and stops it with
            # SIGTERM) inherits this handler; raising there sent the child back into the parent's code and
            # hung the deploy waiting for it. A child just ends, as SIGTERM's default would.
            os._exit(128 + signum)
        raise KeyboardInterrupt(f"signal {signum} (SIGTERM): destroying the lab before exiting")

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def containers_held(containers: Sequence[Mapping[str, Any]]) -> str:
    """``14 container(s) (14 running)``, or ``(none running)``: a stopped lab is in the way just the same."""
    up = sum(1 for c in containers if c.get("State") == "running")
    return f"{len(containers)} container(s) ({up or 'none'} running)"


def clear_lab_left_by_a_killed_run(lab: str, runtime: DockerRuntime) -> list[dict[str, Any]]:
    """Destroy ``lab`` when a test run that was killed left it (orchestrator.lab.owner), saying so; return
    the lab's containers as they are after. Any other running lab is left alone for the caller to refuse."""
    import warnings

    from orchestrator.lab.deploy import destroy
    from orchestrator.lab.owner import lab_dir_root, left_by_a_killed_run

    running = runtime.lab_containers(lab)
    if running and left_by_a_killed_run(running):
        warnings.warn(
            f"lab {lab!r}: {len(running)} container(s) left by a test run that was killed before it could "
            "destroy them (their owner process is gone); destroyed them before deploying again",
            stacklevel=2,
        )
        destroy(lab, runtime, cleanup=True, lab_dir_root=lab_dir_root(running), quiet=True)
        running = runtime.lab_containers(lab)
    return running


@contextlib.contextmanager
def deployed_lab(
    lab: str | Path,
    workdir: Path,
    *,
    name: str | None = None,
    vars: Mapping[str, Any] | None = None,
    edit: Callable[[dict], None] | None = None,
    configure: bool = True,
    runtime: DockerRuntime | None = None,
    root: Path | None = None,
) -> Iterator[Lab]:
    """Deploy ``lab`` (a name in ``labs/`` or a ``*.clab.yml`` file) from ``workdir``, configure it unless
    told not to, yield its handle, and destroy it whatever happens (a failed deploy or configure, a failing
    test, KeyboardInterrupt, SIGTERM). See :func:`topology_file` for ``name``, ``vars`` and ``edit``; ``root``
    (default: the working directory) is where the handle finds relative trace paths."""
    from orchestrator.lab.deploy import deploy, destroy
    from orchestrator.lab.owner import OWNER_LABEL, process_token
    from orchestrator.lab.runtime.docker import DockerRuntime
    from orchestrator.lab.topology import load_topology

    workdir = Path(workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    path = topology_file(lab, workdir, name, vars, edit).resolve()
    topo = load_topology(path)
    runtime = runtime or DockerRuntime()
    existing = clear_lab_left_by_a_killed_run(topo.name, runtime)
    if existing:
        # Never ours to destroy: the user's own lab, or one a run that is still going deployed.
        raise LabError(
            f"lab {topo.name!r} already has {containers_held(existing)}; the plugin does not touch a lab "
            f"it did not deploy: pass name= for a copy under another name, or `aidclab destroy {topo.name}` "
            "first"
        )
    for node in topo.nodes.values():
        node.labels[OWNER_LABEL] = process_token(os.getpid()) or ""
    handle = Lab(topo, workdir, runtime, Path(root or Path.cwd()).resolve())
    try:
        with _terminate_as_interrupt():
            with working_dir(workdir):
                deploy(topo, runtime)
            if configure:
                handle.configure()
            yield handle
    finally:
        try:
            destroy(topo.name, runtime, cleanup=True, lab_dir_root=workdir, quiet=True)
        except Exception as exc:  # a failed destroy must say so, with the lab named, not vanish
            raise LabError(
                f"destroying lab {topo.name!r} failed: {exc}; clean up with `aidclab destroy {topo.name}`"
            ) from exc


def lab_fixture(
    lab: str | Path,
    *,
    scope: str = "module",
    name: str | None = None,
    vars: Mapping[str, Any] | None = None,
    edit: Callable[[dict], None] | None = None,
    configure: bool = True,
) -> Any:
    """A pytest fixture that deploys ``lab`` once per ``scope`` (module by default; ``session`` shares it
    with every module that uses the fixture), configures it, yields its :class:`Lab` and destroys it. A lab
    name or relative path is found from pytest's rootdir (``leaf-spine``: ``labs/leaf-spine.clab.yml``).
    Assign it to the name your tests use: ``lab = lab_fixture("leaf-spine")``. Arguments: see
    :func:`deployed_lab`."""
    if scope not in SCOPES:
        raise ValueError(f"lab_fixture({lab!r}, scope={scope!r}): scope is one of {', '.join(SCOPES)}")

    def fixture(
        aidclab_runtime: DockerRuntime,
        tmp_path_factory: pytest.TempPathFactory,
        request: pytest.FixtureRequest,
    ) -> Iterator[Lab]:
        from orchestrator.lab.topology import resolve_lab

        # "leaf-spine" is labs/leaf-spine.clab.yml in the project pytest runs in (its rootdir), wherever
        # the working directory happens to be when the fixture is set up.
        path = resolve_lab(str(lab))
        path = path if path.is_absolute() else request.config.rootpath / path
        workdir = tmp_path_factory.mktemp(f"aidclab-{name or path.name.split('.')[0]}")
        with deployed_lab(
            path,
            workdir,
            name=name,
            vars=vars,
            edit=edit,
            configure=configure,
            runtime=aidclab_runtime,
            root=request.config.rootpath,
        ) as handle:
            yield handle

    fixture.__doc__ = f"lab {lab} (scope {scope}), deployed and destroyed by aidclab.pytest.lab_fixture"
    return pytest.fixture(scope=scope)(fixture)  # type: ignore[call-overload]


@pytest.fixture(scope="session")
def aidclab_runtime() -> DockerRuntime:
    """The Docker engine every lab fixture deploys with; override it in a conftest.py to use another."""
    from orchestrator.lab.runtime.docker import DockerRuntime

    return DockerRuntime()
