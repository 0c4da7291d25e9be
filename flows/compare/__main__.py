"""`python -m flows.compare`: see flows/compare/cli.py."""

import sys

from flows.compare.cli import main

sys.exit(main(sys.argv[1:]))
