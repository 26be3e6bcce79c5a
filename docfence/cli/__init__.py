"""The `docfence` command: thin subcommands over service, worker and maintenance.

Each subcommand module exposes `register(subparsers)`, which adds its parser and sets `func`
(a callable taking the parsed args and returning the exit code).
"""

from __future__ import annotations

import argparse
import importlib
import sys

# Modules under docfence.cli that provide commands; each owns its own arguments.
COMMAND_MODULES = ("runtime", "watermark", "jobs", "keys", "serve", "data", "reports", "bench",
                   "inspect", "capacity")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="docfence",
        description="Fenced, deadline-bounded PDF jobs: watermarking and report rendering.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        module = importlib.import_module(f"docfence.cli.{name}")
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
