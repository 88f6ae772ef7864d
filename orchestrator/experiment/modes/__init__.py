"""The registry of experiment modes: one module per mode in this package, each a class registered by the
:class:`aidcnet.modes.Mode` it implements.

Every module here is imported once, on first use of the registry, so adding a mode is adding a module
(plus its name in ``aidcnet/modes.py`` and, if the agents must do something new, their side). The CLI's
choices, the report's ordering and the benches read the modes from here and from ``Mode``.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import TYPE_CHECKING, TypeVar

from aidcnet.modes import Mode

if TYPE_CHECKING:
    from orchestrator.experiment.modes.base import ExperimentMode

_REGISTRY: dict[Mode, type[ExperimentMode]] = {}
# Modules of this package that hold shared code, not a mode.
_NOT_MODES = frozenset({"base", "messages", "collective"})
M = TypeVar("M", bound="type[ExperimentMode]")


def register(cls: M) -> M:
    if cls.name in _REGISTRY and _REGISTRY[cls.name] is not cls:
        first = _REGISTRY[cls.name].__name__
        raise RuntimeError(f"mode {cls.name} registered twice ({first}, {cls.__name__})")
    _REGISTRY[cls.name] = cls
    return cls


def _load() -> dict[Mode, type[ExperimentMode]]:
    if len(_REGISTRY) < len(Mode):
        for info in pkgutil.iter_modules(__path__):
            if info.name not in _NOT_MODES:
                importlib.import_module(f"{__name__}.{info.name}")
        missing = [m for m in Mode if m not in _REGISTRY]
        if missing:
            raise RuntimeError(f"modes without an implementation in {__name__}: {', '.join(missing)}")
    return _REGISTRY


def registered() -> dict[Mode, type[ExperimentMode]]:
    """Every mode, in ``Mode``'s order (the order reports show them in)."""
    modes = _load()
    return {m: modes[m] for m in Mode}


def mode_class(name: str) -> type[ExperimentMode]:
    """The class of mode ``name``; ValueError listing the modes when there is none."""
    try:
        return _load()[Mode(name)]
    except ValueError:
        raise ValueError(f"mode {name!r} does not exist; choose one of {', '.join(Mode)}") from None
