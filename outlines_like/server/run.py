"""Running the reference server: in the foreground (``serve``) or on a background thread.

```python
with ServerThread(ServerConfig(model="tiny")) as server:     # a free loopback port
    client = openai.OpenAI(base_url=server.base_url + "/v1", api_key="-")
```
"""

from __future__ import annotations

import socket
import sys
import threading
import time
from types import TracebackType
from typing import Any

from outlines_like.server.app import create_app
from outlines_like.server.config import ServerConfig
from outlines_like.server.loading import load_service
from outlines_like.server.memory import Trimmer, freeze_heap, tune_malloc
from outlines_like.server.service import GenerationService

__all__ = ["ServerThread", "serve"]


def serve(
    config: ServerConfig, *, host: str = "127.0.0.1", port: int = 8000, log_level: str = "info"
) -> None:
    """Run the server in the foreground until interrupted."""
    import logging

    import uvicorn

    if host not in ("127.0.0.1", "localhost", "::1") and config.api_key is None:
        logging.getLogger("outlines_like.server").warning(
            "serving on %s without --api-key: anyone who can reach this port can use the model",
            host,
        )

    # the engine thread shares the GIL with mask threads and request handling: hand it over
    # every millisecond instead of every 5 (a foreground server owns its process)
    sys.setswitchinterval(0.001)
    # ... and its allocator: freed memory goes back to the system (see server/memory.py)
    tune_malloc()
    Trimmer().start()
    # the model and the vocabulary's tables are loaded before the app starts, so that the
    # long-lived heap can be frozen out of the collector's reach (see server/memory.py)
    from outlines_like.fsm.index import prepare_vocabulary

    service = load_service(config)
    prepare_vocabulary(service.vocabulary)
    freeze_heap()
    try:
        uvicorn.run(create_app(service, config), host=host, port=port, log_level=log_level)
    finally:
        service.stop()


class ServerThread:
    """The server on a background thread, bound to a free port on 127.0.0.1.

    Args:
        config: What to serve (ignored for the model when ``service`` is given).
        service: A generation service already loaded (tests share one).
        host: Interface to bind.
        startup_timeout: Seconds to wait for the model to load and the socket to answer.
    """

    def __init__(
        self,
        config: ServerConfig | None = None,
        *,
        service: GenerationService | None = None,
        host: str = "127.0.0.1",
        startup_timeout: float = 120.0,
    ) -> None:
        self.config = config or ServerConfig()
        self.service = service
        self.host = host
        self.startup_timeout = startup_timeout
        self.port = 0
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._sock: socket.socket | None = None

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT`` (add ``/v1`` for an OpenAI client)."""
        return f"http://{self.host}:{self.port}"

    def start(self) -> ServerThread:
        """Bind, start serving and wait until the server is ready."""
        import uvicorn

        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, 0))
        self.port = sock.getsockname()[1]
        self._sock = sock
        app = create_app(self.service, self.config)
        config = uvicorn.Config(
            app, log_level="warning", lifespan="on", timeout_graceful_shutdown=2
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run,
            kwargs={"sockets": [sock]},
            name="outlines-like-http",
            daemon=True,
        )
        self._thread.start()
        deadline = time.monotonic() + self.startup_timeout
        while not self._server.started:
            if not self._thread.is_alive():
                raise RuntimeError("the reference server failed to start (see the log above)")
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError(
                    f"the reference server did not start in {self.startup_timeout} s"
                )
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        """Ask the server to exit and wait for its thread."""
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=15)
        if self._sock is not None:
            self._sock.close()

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
