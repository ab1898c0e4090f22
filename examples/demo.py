"""The ``outlines-like demo`` as a script: the reference server on the tiny model, structured calls.

python examples/demo.py
"""

import sys

from outlines_like.server.demo import run_demo

if __name__ == "__main__":
    sys.exit(run_demo())
