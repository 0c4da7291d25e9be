"""`python -m flows.deploy`: see flows/deploy/cli.py."""

import sys

from flows.deploy.cli import main

sys.exit(main(sys.argv[1:]))
