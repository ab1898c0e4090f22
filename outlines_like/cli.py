"""The ``outlines-like`` command: ``serve``, ``demo`` and ``check``.

``serve`` runs the reference server, ``demo`` shows it off, ``check`` says how a server would
enforce a JSON Schema.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="outlines-like", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the OpenAI-compatible reference server")
    serve.add_argument(
        "--model", default="tiny", help="'tiny' (built locally) or a transformers model folder"
    )
    serve.add_argument("--model-name", default=None, help="the id served in /v1/models")
    serve.add_argument(
        "--host", default="127.0.0.1", help="interface to bind (default: loopback only)"
    )
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--api-key", default=None, help="require 'Authorization: Bearer KEY'")
    serve.add_argument("--max-batch-size", type=int, default=64)
    serve.add_argument("--max-tokens-limit", type=int, default=2048)
    serve.add_argument("--compile-timeout", type=float, default=10.0, help="seconds per constraint")
    _limits(serve)
    serve.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch threads (default: 1 for tiny, else torch's)",
    )
    serve.add_argument(
        "--reasoning",
        action="store_true",
        help="apply chat constraints after the model's </think> (reasoning models)",
    )
    serve.add_argument("--log-level", default="info")

    demo = sub.add_parser(
        "demo", help="start the server on the tiny model and run structured calls"
    )
    demo.add_argument("--model", default="tiny")
    demo.add_argument(
        "--open",
        action="store_true",
        help="then open the browser playground (served at /) and serve until Ctrl-C",
    )

    check = sub.add_parser(
        "check", help="how a server would enforce a JSON Schema, keyword by keyword"
    )
    check.add_argument("schema", help="a JSON Schema file ('-' reads standard input)")
    check.add_argument("--server", required=True, help="sglang, vllm, llamacpp, tgi, ollama...")
    check.add_argument("--server-version", default=None, help="the server's version (vLLM)")
    check.add_argument("--endpoint", choices=("chat", "completions"), default="chat")
    return parser


def _check(args: argparse.Namespace) -> int:
    """Print the compatibility report; exit 1 when the request would be refused."""
    import json
    import pathlib

    from outlines_like.adapters.report import check
    from outlines_like.errors import InvalidConstraintError
    from outlines_like.types import JsonSchema

    text = sys.stdin.read() if args.schema == "-" else pathlib.Path(args.schema).read_text()
    try:
        report = check(
            JsonSchema(json.loads(text)),
            args.server,
            version=args.server_version,
            endpoint=args.endpoint,
        )
    except (ValueError, InvalidConstraintError) as exc:
        print(f"outlines-like check: {exc}", file=sys.stderr)
        return 2
    print(report)
    return 0 if report.ok else 1


_LIMITS: tuple[tuple[str, type, str], ...] = (
    ("compile_memory_bytes", int, "resident bytes a compile worker may reach"),
    ("compile_workers", int, "compile worker processes"),
    ("cache_bytes", int, "memory the compiled-constraint cache may hold"),
    ("mask_timeout", float, "seconds one mask may take before its request fails"),
    ("step_mask_wait", float, "seconds a step waits for masks that are not ready"),
    ("mask_workers", int, "threads computing masks off the engine thread"),
    ("body_timeout", float, "seconds a client may take to send its request body"),
    ("template_timeout", float, "seconds a chat template may render"),
    ("template_max_bytes", int, "largest rendered chat prompt"),
)
"""The budget options of ``serve``: (ServerConfig field, type, help); defaults are the config's."""


def _limits(serve: argparse.ArgumentParser) -> None:
    from outlines_like.server.config import ServerConfig

    defaults = ServerConfig()
    for field, kind, text in _LIMITS:
        default = getattr(defaults, field)
        serve.add_argument(
            "--" + field.replace("_", "-"),
            type=kind,
            default=default,
            help=f"{text} (default: {default:g})" if kind is float else f"{text} ({default})",
        )
    serve.add_argument(
        "--allow-request-templates",
        action="store_true",
        help="render a chat template sent in chat_template_kwargs (sandboxed, time-limited)",
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    args = _parser().parse_args(argv)
    if args.command == "serve":
        from outlines_like.server.config import ServerConfig
        from outlines_like.server.run import serve

        config = ServerConfig(
            model=args.model,
            model_name=args.model_name,
            api_key=args.api_key,
            max_batch_size=args.max_batch_size,
            max_tokens_limit=args.max_tokens_limit,
            compile_timeout=args.compile_timeout,
            torch_threads=args.threads,
            reasoning=args.reasoning,
            allow_request_templates=args.allow_request_templates,
            **{field: getattr(args, field) for field, _, _ in _LIMITS},
        )
        serve(config, host=args.host, port=args.port, log_level=args.log_level)
        return 0
    if args.command == "check":
        return _check(args)
    from outlines_like.server.demo import run_demo

    return run_demo(model=args.model, open_browser=args.open)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
