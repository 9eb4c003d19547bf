"""Runs a `lowbit` verb in this process, as the command line would, and judges the outcome.

`run_verb(argv, seconds)` calls `lowbit.cli.main` with stdout and stderr captured and a time
limit (SIGALRM); `Outcome.problem()` says what is wrong with it, if anything: a traceback, an
exit code other than 0 or 1, a warning, an error that is not one `lowbit: error:` line at the
end (continuation lines of one message are indented), a hang, or an output file left behind by
a refusal.
"""

from __future__ import annotations

import contextlib
import io
import re
import signal
import traceback
import warnings
from dataclasses import dataclass
from pathlib import Path


class Hang(BaseException):
    """Raised by the alarm: a BaseException, so that no `except Exception` swallows it."""


@dataclass
class Outcome:
    argv: list[str]
    code: int | None
    stdout: str
    stderr: str
    crash: str = ""
    hung: bool = False
    output: Path | None = None
    before: tuple | None = None
    """(size, mtime) of the output before the run, None if it did not exist."""

    def problem(self) -> str | None:
        if self.hung:
            return "hung"
        if self.crash:
            return f"traceback:\n{self.crash}"
        if self.code not in (0, 1):
            return f"exit code {self.code}"
        if "Traceback" in self.stderr or re.search(r"^\S+:\d+: \w*Warning: ", self.stderr, re.M):
            return f"traceback or warning on stderr:\n{self.stderr}"
        if self.code == 1:
            # The error is the last message: one line, continued only by indented lines (a
            # list of nodes); a progress bar may come before it.
            lines = self.stderr.rstrip("\n").split("\n")
            starts = [i for i, line in enumerate(lines) if line.startswith("lowbit: error: ")]
            if len(starts) != 1 or any(not line.startswith("  ")
                                       for line in lines[starts[0] + 1:]):
                return f"not a one-line error:\n{self.stderr}"
            if self.output is not None and _stamp(self.output) != self.before:
                return f"refused but wrote {self.output}"
            leftovers = [p.name for p in self.output.parent.glob(f".{self.output.name}.*")] \
                if self.output is not None else []
            if leftovers:
                return f"refused but left temporary files {leftovers}"
        return None


def _stamp(path: Path) -> tuple | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns


def run_verb(argv: list[str], seconds: float = 20.0, output: Path | None = None) -> Outcome:
    """Run `lowbit ARGV` in-process; `output` is the file the verb would write, if any."""
    from lowbit.cli import main

    out, err = io.StringIO(), io.StringIO()

    def alarm(signum, frame):
        raise Hang

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    outcome = Outcome(list(argv), None, "", "", output=output,
                      before=_stamp(output) if output is not None else None)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), \
                warnings.catch_warnings():
            warnings.simplefilter("default")
            try:
                outcome.code = main(argv)
            except SystemExit as exc:
                outcome.code = exc.code if isinstance(exc.code, int) else 1
    except Hang:
        outcome.hung = True
    except Exception:
        outcome.crash = traceback.format_exc()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    outcome.stdout, outcome.stderr = out.getvalue(), err.getvalue()
    return outcome
