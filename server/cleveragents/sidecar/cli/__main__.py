"""``python -m cleveragents.sidecar.cli``: the console script."""

import sys

from cleveragents.sidecar.cli import main

sys.exit(main())
