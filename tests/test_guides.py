"""The guides in docs/: every snippet that needs no server runs as written."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest

RECORDINGS = pathlib.Path(__file__).parent / "recordings"


# ---------------------------------------------------------------- guides


@pytest.mark.parametrize("guide", ["reasoning.md", "tools.md", "streaming.md"])
def test_guide_snippets_run(guide: str) -> None:
    """Every snippet of the guides that needs no server runs as written."""
    import re

    path = pathlib.Path(__file__).parent.parent / "docs" / guide
    blocks = re.findall(r"```python\n(.*?)```", path.read_text(), re.S)
    offline = [b for b in blocks if "openai.OpenAI(" not in b]
    assert offline
    namespace: dict[str, Any] = {}
    for block in offline:
        exec(compile(block, str(path), "exec", dont_inherit=True), namespace)
