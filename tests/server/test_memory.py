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


def test_freeze_heap_takes_the_live_objects_out_of_the_collectors_reach() -> None:
    script = textwrap.dedent(
        """
        import gc
        from outlines_like.server.memory import freeze_heap

        table = [[i] for i in range(50_000)]  # long-lived, tracked containers
        before = len(gc.get_objects())
        frozen = freeze_heap()
        assert frozen == gc.get_freeze_count() >= 50_000, (frozen, before)
        assert len(gc.get_objects()) < before - 50_000  # the collector no longer sees them
        assert table[-1] == [49_999]  # and they are still alive
        print("ok")
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
