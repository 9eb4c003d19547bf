"""What a budget search shows while it works: one progress bar per step on stderr, and a line
per configuration tried."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any


class Progress:
    """Progress bars and notes on stderr (nothing when disabled)."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self._console: Any = None
        if enabled:
            from rich.console import Console

            self._console = Console(stderr=True)

    @contextlib.contextmanager
    def step(self, description: str, total: int | None) -> Iterator[Callable[[int], None]]:
        """A bar for one step; yields `advance(n=1)`."""
        if not self.enabled:
            yield lambda n=1: None
            return
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            TextColumn,
            TimeElapsedColumn,
        )
        from rich.progress import (
            Progress as Bar,
        )

        with Bar(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                 TimeElapsedColumn(), console=self._console, transient=True) as bar:
            task = bar.add_task(description, total=total)
            yield lambda n=1: bar.advance(task, n)

    def note(self, text: str) -> None:
        """One line on stderr."""
        if self.enabled:
            self._console.print(text, highlight=False, markup=False)
