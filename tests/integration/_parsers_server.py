"""A second vLLM with a tool parser and a reasoning parser, for the reasoning and tools suite.

It runs from the venv and the tiny Qwen3-shaped model that the shared toolkit made in
``WORKDIR`` (``setup_servers.sh WORKDIR vllm``), with the same environment and flags as the
toolkit's vLLM, plus ``--enable-auto-tool-choice --tool-call-parser hermes --reasoning-parser
qwen3`` and the reference server's chat template (a Qwen3-style ChatML template with a tools
section, ``<tool_call>`` markup and ``enable_thinking``), so that both servers render the same
prompt for the same messages. ``VLLM_ENFORCE_STRICT_TOOL_CALLING=0`` makes vLLM force
``tool_choice`` "required"/named through ``structured_outputs.json`` (see ``start``).
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import signal
import subprocess
import time

PARSER_FLAGS = (
    "--enable-auto-tool-choice",
    "--tool-call-parser",
    "hermes",
    "--reasoning-parser",
    "qwen3",
)


def _children(pid: int) -> list[int]:
    """Every descendant of ``pid`` (read from /proc), so that none outlives the server."""
    found: list[int] = []
    todo = [pid]
    while todo:
        parent = todo.pop()
        try:
            tasks = pathlib.Path(f"/proc/{parent}/task").iterdir()
            kids: list[int] = []
            for task in tasks:
                text = (task / "children").read_text()
                kids.extend(int(k) for k in text.split())
        except OSError:
            continue
        found.extend(kids)
        todo.extend(kids)
    return found


def _alive(pid: int) -> bool:
    try:
        state = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


class ParsersVLLM:
    """One vLLM with parsers: ``start()`` launches it, ``stop()`` ends it and its children."""

    def __init__(self, workdir: pathlib.Path, rundir: pathlib.Path, port: int) -> None:
        """Prepare a server on ``port``; its template, temp files and log go in ``rundir``."""
        self.workdir = workdir
        self.rundir = rundir
        self.port = port
        self.log = rundir / "vllm-parsers.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        """The OpenAI base URL (ends with ``/v1``)."""
        return f"http://127.0.0.1:{self.port}/v1"

    def command(self, template: pathlib.Path) -> list[str]:
        """The command line: the toolkit's flags plus the parsers and the chat template."""
        return [
            str(self.workdir / "venv-vllm" / "bin" / "python"),
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(self.workdir / "tiny-qwen3"),
            "--served-model-name",
            "tiny",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--max-model-len",
            "2048",
            "--enforce-eager",
            "--structured-outputs-config",
            '{"backend": "xgrammar", "disable_any_whitespace": true}',
            *PARSER_FLAGS,
            "--chat-template",
            str(template),
        ]

    def start(self, chat_template: str) -> None:
        """Launch the server (returns at once; poll ``/health`` to know when it is ready)."""
        template = self.rundir / "chat_template.jinja"
        template.write_text(chat_template)
        # Unix socket paths are limited to 107 bytes: vLLM puts ZMQ sockets in TMPDIR.
        tmp = self.rundir / "tmp"
        if len(str(tmp)) + 38 > 107:
            tmp = pathlib.Path("/tmp")
        tmp.mkdir(parents=True, exist_ok=True)
        cache = self.workdir / "cache"
        env = {
            **os.environ,
            "TMPDIR": str(tmp),
            "VLLM_CPU_KVCACHE_SPACE": "1",
            "VLLM_CACHE_ROOT": str(cache / "vllm"),
            "TORCHINDUCTOR_CACHE_DIR": str(cache / "inductor"),
            "TRITON_CACHE_DIR": str(cache / "triton"),
            "XDG_CACHE_HOME": str(cache),
            "HF_HOME": str(cache / "huggingface"),
            "HF_HUB_OFFLINE": "1",
            "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
            # Forced tool calls through structured_outputs.json (the parameters schema, with
            # the server's disable_any_whitespace), not xgrammar structural tags: with those,
            # a non-strict tool's arguments are any JSON and a strict tool's allow free
            # whitespace, which a random model pads up to max_tokens.
            "VLLM_ENFORCE_STRICT_TOOL_CALLING": "0",
        }
        env.pop("VLLM_PORT", None)  # vLLM reads it for its internal ports
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                self.command(template),
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=self.rundir,
            )

    def stop(self, grace: float = 20.0) -> None:
        """SIGTERM the server, then its children (EngineCore, workers); SIGKILL what stays."""
        proc = self.proc
        if proc is None:
            return
        kids = _children(proc.pid)
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(grace)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        deadline = time.monotonic() + 5
        while any(_alive(k) for k in kids) and time.monotonic() < deadline:
            time.sleep(0.2)
        for sig in (signal.SIGTERM, signal.SIGKILL):
            left = [k for k in kids if _alive(k)]
            for kid in left:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(kid, sig)
            if left:
                time.sleep(2)
        self.proc = None

    def tail(self, chars: int = 3000) -> str:
        """The end of the server's log, for failure messages."""
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""
