"""How a command prints its result: a readable line by default, one JSON object with `--json`."""

from __future__ import annotations

import argparse
import json
from typing import Any


def add_json_flag(parser: argparse.ArgumentParser, *, always: bool = False) -> None:
    """`--json` on a command; `always`: its output is JSON lines already (the flag is accepted for
    scripts that pass it to every command)."""
    parser.add_argument("--json", action="store_true",
                        help="(output is always JSON lines)" if always else "print the result as JSON")


def emit(args: argparse.Namespace, text: str, data: Any) -> None:
    """`text` for people, or `data` as JSON when the command was given `--json`."""
    if getattr(args, "json", False):
        print(json.dumps(data, sort_keys=True, default=str))
    else:
        print(text)
