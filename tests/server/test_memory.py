"""The server's allocator settings: applied on glibc, harmless everywhere, trimmed on a thread."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from outlines_like.server.memory import Trimmer, _glibc, trim


def test_tuning_applies_on_glibc_in_a_process_of_its_own() -> None:
    script = textwrap.dedent(
        """
        from outlines_like.server.memory import _glibc, tune_malloc
        print(tune_malloc(), _glibc() is not None)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    ).stdout.split()
    assert out[0] == out[1]  # applied exactly where glibc is the C library


def test_trim_and_the_trimmer_run() -> None:
    if _glibc() is None:
        pytest.skip("not glibc: nothing to trim")
    assert trim() in (True, False)
    trimmer = Trimmer(interval=0.01).start()
    trimmer._stop.wait(0.05)
    trimmer.stop()
    trimmer._thread.join(timeout=5)
    assert not trimmer._thread.is_alive()
