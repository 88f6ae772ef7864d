"""A registry of classes found in one package, one module each: the experiment modes, the report's
sections. Every module of the package is imported once, on first use, so adding one is adding a module;
a class joins with ``@registry.register`` under its ``name``, which must be unique."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Hashable, Iterable
from typing import Any, Generic, TypeVar

C = TypeVar("C", bound=type)


class Registry(Generic[C]):
    def __init__(self, package: str, path: Iterable[str], what: str, shared: Iterable[str] = ()) -> None:
        """``package``/``path``: the package's ``__name__`` and ``__path__``; ``what``: what a registered
        class is, in errors; ``shared``: its modules that hold shared code, not a registered class."""
        self.package = package
        self.path = list(path)
        self.what = what
        self.shared = frozenset(shared)
        self.classes: dict[Hashable, C] = {}
        self._loaded = False

    def register(self, cls: C) -> C:
        name: Any = cls.name  # type: ignore[attr-defined]
        if name in self.classes and self.classes[name] is not cls:
            first = self.classes[name].__name__
            raise RuntimeError(f"{self.what} '{name}' registered twice ({first}, {cls.__name__})")
        self.classes[name] = cls
        return cls

    def load(self, complete: Callable[[dict[Hashable, C]], None] | None = None) -> dict[Hashable, C]:
        """Every class, its package's modules imported first; ``complete`` may check the result once."""
        if not self._loaded:
            for info in pkgutil.iter_modules(self.path):
                if info.name not in self.shared:
                    importlib.import_module(f"{self.package}.{info.name}")
            self._loaded = True
            if complete is not None:
                complete(self.classes)
        return self.classes
