"""`python -m docfence.api --host H --port P`: serve the API with settings from the environment."""

from __future__ import annotations

import argparse

from docfence.config import load_settings
from docfence.observability.multiproc import share


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m docfence.api")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--log-level", default="warning")
    args = parser.parse_args(argv)
    settings = load_settings()
    share(settings)  # before the app imports prometheus_client: this host's counters, one scrape
    from docfence.api.app import serve

    serve(settings, args.host, args.port, log_level=args.log_level)


if __name__ == "__main__":
    main()
