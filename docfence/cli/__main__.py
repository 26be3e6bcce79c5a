"""`python -m docfence.cli` runs the command line."""

import sys

from docfence.cli import main

sys.exit(main())
