"""`docfence serve --host H --port P`: run the HTTP API with uvicorn (access log off)."""

from __future__ import annotations

import argparse
from typing import Any

from docfence.config import load_settings


def register(sub: Any) -> None:
    serve = sub.add_parser("serve", help="run the HTTP API")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8080)
    serve.add_argument("--log-level", default="info",
                       choices=["critical", "error", "warning", "info", "debug"])
    serve.set_defaults(func=run_serve)


def run_serve(args: argparse.Namespace) -> int:
    from docfence.api import serve

    serve(load_settings(), args.host, args.port, log_level=args.log_level)
    return 0
