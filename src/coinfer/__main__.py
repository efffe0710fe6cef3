"""``python -m coinfer`` is the ``coinfer`` command."""

import sys

from coinfer.cli import main

sys.exit(main())
