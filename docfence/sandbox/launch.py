"""Starting a zygote interpreter: its command, its environment and its control socket. Imports only what
the start itself needs, so `docfence watermark` can start the zygote before it imports anything else."""

from __future__ import annotations

import os
import socket
import subprocess

from docfence.config.environment import sandbox_environment
from docfence.core.interpreter import module_command


def spawn_zygote(
    profile: str, *, command_line: str | None = None
) -> tuple[subprocess.Popen[bytes], socket.socket]:
    """Start a zygote of `profile` (supervisor.PROFILES); returns the process and our end of its control
    socket. It dies with the thread that called this (PR_SET_PDEATHSIG), so call it from a thread that
    lives as long as the sandbox. `command_line` ("ascii" or "any": the text its marks may hold): a
    zygote for one run of the docfence command (zygote.main's --command-line). Raises OSError when no
    process can be started."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        with theirs:
            proc = subprocess.Popen(
                module_command("docfence.sandbox.zygote", "--parent", str(os.getpid()),
                               "--fd", str(theirs.fileno()), "--profile", profile,
                               *(["--command-line", command_line] if command_line else [])),
                pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, close_fds=True,
                env=sandbox_environment(),  # an allow-list: no credential reaches a render process
            )
    except BaseException:
        ours.close()
        raise
    return proc, ours
