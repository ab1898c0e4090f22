"""``python -m outlines_like.server [serve options]``: the same as ``outlines-like serve``."""

import sys

from outlines_like.cli import main

sys.exit(main(["serve", *sys.argv[1:]]))
