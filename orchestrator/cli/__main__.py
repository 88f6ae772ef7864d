"""``python -m orchestrator.cli``: the same as the ``aidclab`` command."""

import sys

from orchestrator.cli import main

sys.exit(main())
