"""Queue benchmark (see docfence/benchmarks/queue.py); same as `docfence bench queue`."""

from __future__ import annotations

import sys

from docfence.cli import main

if __name__ == "__main__":
    sys.exit(main(["bench", "queue", *sys.argv[1:]]))
