"""Engine fixtures: the tiny model (built once per session)."""

from tests import _tiny

# the tiny model's session fixtures, shared with tests/server
tiny_path = _tiny.tiny_path
tiny_model = _tiny.tiny_model
one_torch_thread = _tiny.one_torch_thread
