"""``python -m context_core``: the ``context-core`` command."""

import sys

from context_core.cli import main

sys.exit(main())
