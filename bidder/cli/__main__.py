"""`python -m bidder.cli`: the `bidder` command, run by this interpreter."""

import sys

from bidder.cli.main import main

sys.exit(main())
