"""How a `docfence` command ends when something goes wrong: one line on stderr and an exit code.

Configuration and input errors name the setting or flag as the user typed it; no traceback reaches the
user unless `--debug` asks for one. A closed pipe (`docfence audit export | head`) ends quietly.

Exit codes: 0 ok, 1 job failed or canceled (or the command found a problem), 2 usage or configuration,
3 poll timeout, 4 request refused or server unreachable, 130 interrupted, 141 output pipe closed.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import NoReturn

from docfence.core.errors import ApiError, ConfigError, DocfenceError, RequestError, StoreUnavailable

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_POLL_TIMEOUT, EXIT_REQUEST = 0, 1, 2, 3, 4
EXIT_INTERRUPTED, EXIT_BROKEN_PIPE = 130, 141


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line naming the flag and pointing at --help."""

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: {message} (see {self.prog} --help)", file=sys.stderr)
        sys.exit(EXIT_USAGE)


def say(message: str) -> None:
    """One line on stderr, prefixed like every docfence message."""
    print(f"docfence: {' '.join(str(message).split())}", file=sys.stderr)


def run_command(func: Callable[[argparse.Namespace], int], args: argparse.Namespace, *,
                debug: bool = False) -> int:
    """Run one subcommand; every error becomes one line and an exit code (`debug`: re-raised)."""
    try:
        return func(args)
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt:
        if debug:
            raise
        say("interrupted")
        return EXIT_INTERRUPTED
    except StoreUnavailable as exc:
        if debug:
            raise
        say(f"{describe(exc)} ({database_hint()})")
        return EXIT_FAILED
    except DocfenceError as exc:
        if debug:
            raise
        say(describe(exc))
        return exit_code(exc)
    except OSError as exc:  # a file or folder named on the command line: the user's to fix
        if debug:
            raise
        where = f"{exc.filename}: " if exc.filename else ""
        say(f"{where}{exc.strerror or exc}")
        return EXIT_USAGE
    except Exception as exc:
        if debug:
            raise
        say(f"unexpected {type(exc).__name__}: {exc} (run with --debug for the traceback)")
        return EXIT_FAILED


def describe(exc: DocfenceError) -> str:
    """The one line for `exc`: configuration errors already name the setting; others lead with a code."""
    if isinstance(exc, ConfigError):
        return exc.message
    return f"{exc.code}: {exc.message}"


def database_hint() -> str:
    """Which database the command tried, password removed, so "cannot connect" names what to check."""
    from urllib.parse import urlsplit, urlunsplit

    from docfence.config import load_settings

    try:
        url = load_settings().database_url
    except ConfigError:
        return "DOCFENCE_DATABASE_URL"
    parts = urlsplit(url)
    if parts.password:
        host = parts.hostname or ""
        netloc = f"{parts.username}:***@{host}" + (f":{parts.port}" if parts.port else "")
        url = urlunsplit(parts._replace(netloc=netloc))
    return f"database {url}"


def exit_code(exc: DocfenceError) -> int:
    if isinstance(exc, ConfigError):
        return EXIT_USAGE
    if isinstance(exc, ApiError | RequestError):
        return EXIT_REQUEST
    return EXIT_FAILED


def _silence_stdout() -> None:
    """The reader went away: point stdout at /dev/null so the interpreter's final flush stays quiet."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
