"""`python -m bench`: the whole benchmark in one command (see bench/README.md)."""

import sys

from bench.run import main

sys.exit(main())
