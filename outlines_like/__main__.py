"""``python -m outlines_like``: the ``outlines-like`` command."""

import sys

from outlines_like.cli import main

sys.exit(main())
