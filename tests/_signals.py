"""Subprocess helper for the Ctrl-C tests."""

from __future__ import annotations

import signal


def interruptible() -> None:
    """``preexec_fn`` that restores SIGINT's default action in the child before it execs Python.

    A process started in the background by a non-interactive shell (``nohup``, ``cmd &``, some CI
    runners) inherits SIGINT as ignored; Python then installs no ``KeyboardInterrupt`` handler, and a
    test that sends SIGINT would see the child finish with status 0 instead of being interrupted.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)
