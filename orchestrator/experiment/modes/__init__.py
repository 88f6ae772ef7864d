"""The registry of experiment modes: one module per mode in this package, each a class registered by the
:class:`aidcnet.modes.Mode` it implements.

Every module here is imported once, on first use of the registry, so adding a mode is adding a module
(plus its name in ``aidcnet/modes.py`` and, if the agents must do something new, their side). The CLI's
choices, the report's ordering and the benches read the modes from here and from ``Mode``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aidcnet.modes import Mode
from orchestrator.registry import Registry

if TYPE_CHECKING:
    from orchestrator.experiment.modes.base import ExperimentMode

# Modules of this package that hold shared code, not a mode.
_MODES: Registry = Registry(
    __name__,
    __path__,
    "mode",
    shared={"base", "messages", "collective", "closed_loop", "replaying", "jobs"},
)
register = _MODES.register


def _every_mode_implemented(classes: dict) -> None:
    missing = [m for m in Mode if m not in classes]
    if missing:
        raise RuntimeError(f"modes without an implementation in {__name__}: {', '.join(missing)}")


def registered() -> dict[Mode, type[ExperimentMode]]:
    """Every mode, in ``Mode``'s order (the order reports show them in)."""
    modes = _MODES.load(_every_mode_implemented)
    return {m: modes[m] for m in Mode}


def mode_class(mode: Mode) -> type[ExperimentMode]:
    """The class of ``mode`` (a name was checked where it came in: the CLI's choices, a results file)."""
    return _MODES.load(_every_mode_implemented)[mode]
