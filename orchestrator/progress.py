"""Progress and per-phase timing for every slow command, on stderr so stdout stays machine-readable."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console

# soft_wrap: never break lines, so logs and CI output stay greppable.
console = Console(stderr=True, highlight=False, soft_wrap=True)


class Phases:
    """Prints ``[phase] ... done in 1.23 s`` lines and a final one-line summary with the total."""

    def __init__(self, title: str):
        self.title = title
        self.started = time.monotonic()
        self.timings: dict[str, float] = {}

    @contextmanager
    def phase(self, name: str, detail: str = "") -> Iterator[None]:
        t0 = time.monotonic()
        console.print(f"[bold cyan]{self.title}[/] \\[{name}] {detail}".rstrip())
        try:
            yield
        except BaseException:
            console.print(f"[bold red]{self.title}[/] \\[{name}] failed after {time.monotonic() - t0:.2f} s")
            raise
        self.timings[name] = time.monotonic() - t0
        console.print(f"[bold cyan]{self.title}[/] \\[{name}] done in {self.timings[name]:.2f} s")

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def summary(self, text: str) -> None:
        parts = ", ".join(f"{k} {v:.2f}s" for k, v in self.timings.items())
        console.print(f"[bold green]{self.title}:[/] {text} in {self.elapsed:.2f} s ({parts})")


class Counter:
    """A 'k/n' progress line for parallel work, rewritten in place on a terminal."""

    def __init__(self, label: str, total: int):
        self.label, self.total, self.done = label, total, 0
        self.tty = sys.stderr.isatty()

    def step(self, what: str = "") -> None:
        self.done += 1
        if self.tty:
            console.print(f"  {self.label} {self.done}/{self.total} {what}".ljust(70), end="\r")
        elif self.done == self.total or self.done % max(1, self.total // 4) == 0:
            console.print(f"  {self.label} {self.done}/{self.total}")

    def close(self) -> None:
        if self.tty:
            console.print(" " * 80, end="\r")


def fail(message: str) -> None:
    console.print(f"[bold red]error:[/] {message}")
