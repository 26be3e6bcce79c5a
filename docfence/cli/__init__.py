"""The `docfence` command: thin subcommands over service, worker and maintenance.

Each subcommand module exposes `register(subparsers)`, which adds its parser and sets `func`
(a callable taking the parsed args and returning the exit code).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import TYPE_CHECKING

from docfence.cli.errors import EXIT_USAGE, OneLineParser, run_command

if TYPE_CHECKING:
    from docfence.sandbox import Sandbox

# Modules under docfence.cli that provide commands; each owns its own arguments.
COMMAND_MODULES = ("ops", "watermark", "jobs", "keys", "serve", "data", "reports", "bench",
                   "inspect", "capacity", "webhooks", "verify")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="docfence",
        description="Fenced, deadline-bounded PDF jobs: watermarking and report rendering.",
    )
    parser.add_argument("--version", action="version", version=f"docfence {_version()}")
    parser.add_argument("--debug", action="store_true",
                        help="show the traceback of an unexpected error; serve and reconcile log at DEBUG")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        module = importlib.import_module(f"docfence.cli.{name}")
        module.register(sub)
    return parser


#: Long-running commands that record counters: they share one folder per host (see multiproc.share).
SHARED_METRICS_COMMANDS = frozenset({"serve", "worker", "reconcile"})


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    _share_metrics(argv)
    sandbox = _start_sandbox_early(argv)
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        if not getattr(args, "func", None):
            parser.print_help()
            return EXIT_USAGE
        if sandbox is not None:
            args.sandbox = sandbox
        return run_command(args.func, args, debug=args.debug)
    finally:
        if sandbox is not None:
            sandbox.close()


def _start_sandbox_early(argv: list[str]) -> Sandbox | None:
    """For `docfence watermark`: the sandbox's zygote (imports, fonts, warm-up: ~0.5 s) starts before
    anything else is imported, even the sandbox's own supervisor, so its warm-up overlaps the command's
    imports (~0.3 s) on a second core from the first moment; it warms for this run only (no idle-time
    steps taking a core from the run). Started from this thread, which outlives the command (the zygote
    dies with the thread that started it)."""
    if _command_name(argv) != "watermark" or {"-h", "--help"} & set(argv):
        return None
    from docfence.sandbox.launch import spawn_zygote  # imports little: the start is not held up

    try:
        started = spawn_zygote("watermark", command_line=mark_text(argv))
    except OSError:  # no process to spare just now: the command starts its own and reports the error
        return None
    from docfence.sandbox import Sandbox

    return Sandbox.adopting("watermark", started)


def mark_text(argv: list[str]) -> str:
    """"ascii" when no mark of this command line can hold a character beyond ASCII, else "any". Every
    mark's text comes from the arguments (--text, --mark, --recipient...; the other fields, such as
    {date}, {page} and {sha8}, are ASCII), and --mark's JSON can spell any character as a \\u escape.
    With "ascii" the zygote parses only its first font before forking (the CJK fallback alone takes
    ~0.16 s); a render process that needs another font still parses it itself, only slower."""
    return "ascii" if all(arg.isascii() and "\\u" not in arg for arg in argv) else "any"


def _command_name(argv: list[str]) -> str | None:
    """The subcommand named in `argv` before argparse has read it (its first non-option word)."""
    return next((arg for arg in argv if not arg.startswith("-")), None)


def _share_metrics(argv: list[str]) -> None:
    """Before anything imports prometheus_client: let `serve`, `worker` and `reconcile` write their
    counters to the host's shared folder, so `serve`'s /metrics shows the workers' and reconcilers'."""
    if _command_name(argv) not in SHARED_METRICS_COMMANDS:
        return
    from docfence.core.private_files import private_umask

    private_umask()  # first: the data folder, the counter files and the keys are 0700/0600
    from docfence.cli.serve import check_data_folders
    from docfence.config import load_settings
    from docfence.core.errors import ConfigError
    from docfence.observability.multiproc import metrics_dir, share

    try:
        settings = load_settings()
        check_data_folders(settings)  # the shared folder defaults to one inside the data folder
    except ConfigError:
        return  # the command itself reports the bad setting or folder, in one line
    try:
        share(settings)
    except OSError as exc:
        print(f"docfence: metrics_dir={str(metrics_dir(settings))!r}: {exc.strerror or exc}; this process "
              "serves only its own counters", file=sys.stderr)


def _version() -> str:
    from importlib import metadata  # ~40 ms of imports, only for --version

    try:
        return metadata.version("docfence")
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


if __name__ == "__main__":
    sys.exit(main())
