"""Finish what is in flight, then stop: a drain asked of a long command.

Ctrl-C or SIGTERM stops a run at once: the examples being decoded at that moment are lost (the
same command decodes them again), up to a batch of them. A drain (`kill -USR1 PID`, or
`ask()` in Python) lets a run take no new example, finish the ones in flight, record them and
stop as an interrupt does ("stopped, N of M examples done; the same command resumes"); an
experiment stops before its next step. A command that decodes outside a run (training,
calibration) finishes its step first.

    nohup hybridbench experiment run experiments/edition3.toml ... &
    kill -USR1 PID      # about one answer's decoding time later, it has stopped
"""

from __future__ import annotations

import threading

_asked = threading.Event()


class Drained(KeyboardInterrupt):
    """A run or an experiment stopped by a drain, with every example it began recorded."""


def ask() -> None:
    """Take no new example; stop once those in flight are recorded."""
    _asked.set()


def asked() -> bool:
    return _asked.is_set()


def clear() -> None:
    """Forget a drain asked before (a test, or a process that runs another command after)."""
    _asked.clear()
