// outlines-like playground: a client of the reference server's API, plain JavaScript, no build.
// It checks the constraint as it is typed (POST /v1/constraints/check), streams
// /v1/chat/completions with logprobs (each token's allowed_count and allowed_sample), and writes
// the from_server(...) code of the same call.
"use strict";
(() => {
  const $ = (id) => document.getElementById(id);
  const INT_REGEX = "-?(0|[1-9][0-9]*)";
  const EXAMPLES = {
    int: "",
    choice: "cat\ndog\nfish",
    regex: "[A-Z]{2}-[0-9]{3}",
    json: JSON.stringify(
      {
        type: "object",
        properties: {
          kind: { enum: ["cat", "dog", "fish"] },
          age: { type: "integer", minimum: 0, maximum: 30 },
        },
        required: ["kind", "age"],
      },
      null,
      2,
    ),
    fields: 'kind: Literal["cat", "dog", "fish"]\nage: int\nname: str',
    "grammar:lark": 'start: "answer: " ANSWER "."\nANSWER: "yes" | "no" | "maybe"',
    "grammar:ebnf": 'root ::= "answer: " ("yes" | "no" | "maybe") "."',
    text: "",
  };
  const HELP = {
    int: "An integer: the regex " + INT_REGEX + " (what the library sends for int).",
    choice: "One choice per line.",
    regex: "A regular expression the whole answer must match.",
    json: "A JSON Schema (JSON text).",
    fields: "One field per line, pydantic-style: name: str | int | float | bool | list[T] | Literal[...]",
    "grammar:lark": "A Lark grammar (start rule: start).",
    "grammar:ebnf": "An EBNF / GBNF grammar (start rule: root).",
    text: "No constraint: the model writes freely.",
  };
  const drafts = { ...EXAMPLES };
  let draftKey = null;
  let checkSeq = 0;
  let checkTimer = null;
  let controller = null;

  // ---------------------------------------------------------------- the constraint

  function key() {
    const kind = $("kind").value;
    return kind === "grammar" ? "grammar:" + $("syntax").value : kind;
  }

  function showKind() {
    if (draftKey !== null) drafts[draftKey] = $("constraint").value;
    draftKey = key();
    const kind = $("kind").value;
    $("syntax").hidden = kind !== "grammar";
    $("constraint").hidden = kind === "int" || kind === "text";
    $("constraint").value = drafts[draftKey];
    $("kind-help").textContent = HELP[draftKey];
    scheduleCheck(0);
  }

  class FieldError extends Error {
    constructor(message, line) {
      super(message);
      this.line = line;
    }
  }

  const SCALARS = { str: "string", int: "integer", float: "number", bool: "boolean" };

  function literalItems(inner, line) {
    const items = [];
    const item = /\s*("(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|-?\d+(?:\.\d+)?|True|False)\s*(,|$)/y;
    let at = 0;
    while (at < inner.length) {
      item.lastIndex = at;
      const m = item.exec(inner);
      if (!m) throw new FieldError("Literal[...] takes quoted strings, numbers, True or False", line);
      const raw = m[1];
      if (raw === "True" || raw === "False") items.push(raw === "True");
      else if (raw[0] === "'") items.push(raw.slice(1, -1).replace(/\\'/g, "'"));
      else items.push(JSON.parse(raw));
      at = item.lastIndex;
      if (m[2] === "") break;
    }
    if (!items.length) throw new FieldError("Literal[...] needs at least one value", line);
    return items;
  }

  function fieldType(text, line) {
    const t = text.trim();
    const optional = t.match(/^(.*)\|\s*None$/);
    if (optional) return { anyOf: [fieldType(optional[1], line), { type: "null" }] };
    if (SCALARS[t]) return { type: SCALARS[t] };
    const list = t.match(/^list\[(.*)\]$/);
    if (list) return { type: "array", items: fieldType(list[1], line) };
    const lit = t.match(/^Literal\[(.*)\]$/);
    if (lit) return { enum: literalItems(lit[1], line) };
    throw new FieldError(`unknown type ${JSON.stringify(t)} (use str, int, float, bool, list[T], Literal[...], T | None)`, line);
  }

  function parseFields(text) {
    const properties = {};
    const lines = text.split("\n");
    lines.forEach((raw, i) => {
      const line = raw.replace(/#.*$/, "").trim();
      if (!line) return;
      const m = line.match(/^([A-Za-z_][A-Za-z0-9_]*)\s*:\s*(.+)$/);
      if (!m) throw new FieldError("expected 'name: type'", i + 1);
      if (properties[m[1]]) throw new FieldError(`field ${m[1]} given twice`, i + 1);
      properties[m[1]] = fieldType(m[2], i + 1);
    });
    const names = Object.keys(properties);
    if (!names.length) throw new FieldError("give at least one field", 1);
    return { title: "Answer", type: "object", properties, required: names };
  }

  // The request fields of the constraint (the vLLM dialect the library sends this server).
  function constraintFields() {
    const kind = $("kind").value;
    const text = $("constraint").value;
    if (kind === "text") return {};
    if (kind === "int") return { structured_outputs: { regex: INT_REGEX } };
    if (kind === "choice") {
      const choices = text.split("\n").filter((c) => c.length > 0);
      if (!choices.length) throw new FieldError("give at least one choice, one per line", 1);
      return { structured_outputs: { choice: choices } };
    }
    if (kind === "regex") return { structured_outputs: { regex: text } };
    if (kind === "json") return { structured_outputs: { json: text } };
    if (kind === "fields") return { structured_outputs: { json: parseFields(text) } };
    if ($("syntax").value === "ebnf") return { ebnf: text };
    return { structured_outputs: { grammar: text } };
  }

  // the constraint's fields, or null after showing what is wrong with what was typed
  function fieldsOrShow() {
    try {
      return constraintFields();
    } catch (err) {
      if (!(err instanceof FieldError)) throw err;
      showCheck("bad", `✗ ${err.message} (line ${err.line})`);
      return null;
    }
  }

  function where(text, position) {
    // the offending line of the constraint, with a caret under the place
    const lines = text.split("\n");
    let line;
    let column;
    if (position.line !== undefined) {
      line = position.line - 1;
      column = position.column - 1;
    } else if (position.offset !== undefined) {
      const before = text.slice(0, position.offset).split("\n");
      line = before.length - 1;
      column = before[before.length - 1].length;
    } else return null;
    if (line < 0 || line >= lines.length) return null;
    return lines[line] + "\n" + " ".repeat(Math.max(0, column)) + "^";
  }

  function showCheck(state, message, detail) {
    const box = $("check");
    box.className = "check " + state;
    box.dataset.state = state;
    box.textContent = message;
    if (detail) {
      const pre = document.createElement("pre");
      pre.className = "where";
      pre.textContent = detail;
      box.appendChild(pre);
    }
    $("constraint").classList.toggle("invalid", state === "bad");
  }

  function describePosition(position) {
    if (!position) return "";
    const parts = [];
    if (position.line !== undefined) parts.push(`line ${position.line}, column ${position.column}`);
    if (position.offset !== undefined) parts.push(`position ${position.offset}`);
    if (position.pointer !== undefined) parts.push(`schema ${position.pointer}`);
    return parts.length ? " [" + parts.join("; ") + "]" : "";
  }

  function showApiError(error) {
    const position = error.position;
    const own = $("kind").value !== "fields"; // a field list's positions are the schema's
    const detail = position && own ? where($("constraint").value, position) : null;
    showCheck("bad", "✗ " + error.message + describePosition(position), detail);
  }

  function scheduleCheck(delay) {
    clearTimeout(checkTimer);
    checkTimer = setTimeout(check, delay === undefined ? 350 : delay);
  }

  async function check() {
    const seq = ++checkSeq;
    const fields = fieldsOrShow();
    if (fields === null) return;
    if (!Object.keys(fields).length) {
      showCheck("ok", "free text: no mask");
      return;
    }
    showCheck("pending", "checking…");
    try {
      const resp = await api("/v1/constraints/check", { model: $("model").value || undefined, ...fields });
      const body = await resp.json();
      if (seq !== checkSeq) return;
      if (!resp.ok) showApiError(body.error || { message: resp.statusText });
      else showCheck("ok", `✓ ${body.kind} (${body.field}) compiled in ${(body.seconds * 1000).toFixed(0)} ms`);
    } catch (err) {
      if (seq === checkSeq) showCheck("bad", "✗ the server did not answer: " + err.message);
    }
  }

  // ---------------------------------------------------------------- the API

  function headers() {
    const h = { "content-type": "application/json" };
    const k = $("api_key").value;
    if (k) h.authorization = "Bearer " + k;
    return h;
  }

  function api(path, body, signal) {
    return fetch(path, { method: "POST", headers: headers(), body: JSON.stringify(body), signal });
  }

  async function loadModels() {
    const status = $("server-status");
    try {
      const resp = await fetch("/v1/models", { headers: headers() });
      const body = await resp.json();
      if (!resp.ok) throw new Error(body.error ? body.error.message : resp.statusText);
      const select = $("model");
      select.innerHTML = "";
      for (const card of body.data) {
        const opt = document.createElement("option");
        opt.value = opt.textContent = card.id;
        select.appendChild(opt);
      }
      const card = body.data[0] || {};
      status.textContent = `${location.host} · model ${card.id} · context ${card.max_model_len || "?"} tokens`;
      status.className = "status ok";
    } catch (err) {
      status.textContent = "no server: " + err.message;
      status.className = "status bad";
    }
  }

  function number(id) {
    const v = $(id).value;
    return v === "" ? undefined : Number(v);
  }

  function settings() {
    const s = { max_tokens: number("max_tokens"), temperature: number("temperature") };
    const topP = number("top_p");
    if (topP !== undefined && topP !== 1) s.top_p = topP;
    const seed = number("seed");
    if (seed !== undefined) s.seed = seed;
    return s;
  }

  // ---------------------------------------------------------------- running

  function setStatus(text, state) {
    const el = $("run-status");
    el.textContent = text;
    el.dataset.state = state;
    el.className = "status" + (state === "done" ? " ok" : state === "error" ? " bad" : "");
  }

  function showRunError(error) {
    const box = $("run-error");
    box.hidden = false;
    box.textContent = error.message + (error.param ? ` (${error.param})` : "");
    const param = error.param || "";
    if (/^(structured_outputs|regex|ebnf|grammar|json_schema|response_format|guided_)/.test(param)) {
      showApiError(error); // a constraint error is shown in place, too
    }
  }

  function visible(text) {
    return text.replace(/ /g, "␣").replace(/\n/g, "↵").replace(/\t/g, "⇥") || "∅";
  }

  function tipText(entry, reasoning) {
    const lines = [];
    const p = Math.exp(entry.logprob) * 100;
    lines.push(`token   ${JSON.stringify(entry.token)}   logprob ${entry.logprob.toFixed(3)} (p ${p.toFixed(1)}%)`);
    if (entry.allowed_count === null || entry.allowed_count === undefined) {
      lines.push(reasoning ? "mask    none (reasoning is free)" : "mask    none (free text)");
    } else {
      lines.push(`mask    ${entry.allowed_count} token${entry.allowed_count === 1 ? "" : "s"} allowed`);
    }
    if (entry.allowed_sample && entry.allowed_sample.length) {
      lines.push("allowed " + entry.allowed_sample.map((t) => JSON.stringify(t)).join(" "));
    }
    if (entry.top_logprobs && entry.top_logprobs.length) {
      lines.push("top     " + entry.top_logprobs.map((t) => `${JSON.stringify(t.token)} ${t.logprob.toFixed(2)}`).join("  "));
    }
    return lines.join("\n");
  }

  function addToken(entry, reasoning) {
    const chip = document.createElement("span");
    const count = entry.allowed_count;
    chip.className = "tok" + (count === null || count === undefined ? " free" : count === 1 ? " forced" : "");
    chip.dataset.allowed = count === null || count === undefined ? "" : String(count);
    const text = document.createElement("span");
    text.className = "t";
    text.textContent = visible(entry.token);
    const badge = document.createElement("span");
    badge.className = "n";
    badge.textContent = chip.dataset.allowed || "free";
    chip.append(text, badge);
    chip.addEventListener("mouseenter", (ev) => showTip(ev, tipText(entry, reasoning)));
    chip.addEventListener("mouseleave", hideTip);
    const strip = reasoning ? $("reasoning-tokens") : $("tokens");
    strip.hidden = false;
    strip.appendChild(chip);
  }

  function showTip(ev, text) {
    const tip = $("tip");
    tip.textContent = text;
    tip.hidden = false;
    const r = ev.currentTarget.getBoundingClientRect();
    tip.style.left = Math.min(r.left, window.innerWidth - 440) + "px";
    tip.style.top = r.bottom + 6 + "px";
  }

  function hideTip() {
    $("tip").hidden = true;
  }

  function reset() {
    for (const id of ["answer", "reasoning", "tokens", "reasoning-tokens"]) $(id).textContent = "";
    $("reasoning-box").hidden = true;
    $("reasoning-tokens").hidden = true;
    $("run-error").hidden = true;
    hideTip();
  }

  async function run() {
    const fields = fieldsOrShow();
    if (fields === null) return;
    reset();
    const body = {
      model: $("model").value || undefined,
      messages: [{ role: "user", content: $("prompt").value }],
      ...settings(),
      stream: true,
      stream_options: { include_usage: true },
      logprobs: true,
      top_logprobs: number("top_logprobs") || 0,
      allowed_sample: number("allowed_sample") || 0,
      ...fields,
    };
    controller = new AbortController();
    $("run").disabled = true;
    $("stop").disabled = false;
    const started = performance.now();
    let tokens = 0;
    let finish = null;
    let usage = null;
    let mode = "answer";
    let pending = []; // tokens whose text is held back: placed once their side is known
    const place = (side) => {
      for (const entry of pending) addToken(entry, side === "reasoning");
      pending = [];
    };
    setStatus("waiting for the first token…", "running");
    try {
      const resp = await api("/v1/chat/completions", body, controller.signal);
      if (!resp.ok) {
        const err = await resp.json().catch(() => ({}));
        throw Object.assign(new Error(), err.error || { message: resp.statusText });
      }
      const reader = resp.body.getReader();
      const decoder = new TextDecoder();
      let buffer = "";
      let done = false;
      while (!done) {
        const { value, done: end } = await reader.read();
        if (end) break;
        buffer += decoder.decode(value, { stream: true });
        let cut;
        while ((cut = buffer.indexOf("\n\n")) >= 0) {
          const event = buffer.slice(0, cut);
          buffer = buffer.slice(cut + 2);
          const data = event.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trim()).join("");
          if (!data) continue;
          if (data === "[DONE]") {
            done = true;
            break;
          }
          const chunk = JSON.parse(data);
          if (chunk.error) throw Object.assign(new Error(), chunk.error);
          if (chunk.usage) usage = chunk.usage;
          for (const choice of chunk.choices || []) {
            const delta = choice.delta || {};
            if (delta.reasoning_content) {
              mode = "reasoning";
              $("reasoning-box").hidden = false;
              $("reasoning").textContent += delta.reasoning_content;
            }
            if (delta.content) {
              mode = "answer";
              $("answer").textContent += delta.content;
            }
            const entries = (choice.logprobs && choice.logprobs.content) || [];
            pending.push(...entries);
            tokens += entries.length;
            if (delta.reasoning_content || delta.content) place(mode);
            if (choice.finish_reason) finish = choice.finish_reason;
          }
          const seconds = ((performance.now() - started) / 1000).toFixed(1);
          setStatus(`streaming… ${tokens} tokens, ${seconds} s`, "running");
        }
      }
      place(mode);
      const seconds = ((performance.now() - started) / 1000).toFixed(2);
      const used = usage ? ` · ${usage.prompt_tokens} prompt + ${usage.completion_tokens} completion tokens` : "";
      setStatus(`done: finish_reason ${finish} · ${tokens} tokens in ${seconds} s${used}`, "done");
    } catch (err) {
      place(mode);
      if (err.name === "AbortError") setStatus("stopped", "stopped");
      else {
        setStatus("failed", "error");
        showRunError(err);
      }
    } finally {
      controller = null;
      $("run").disabled = false;
      $("stop").disabled = true;
    }
  }

  // ---------------------------------------------------------------- copy as Python

  function pyStr(s) {
    // a raw string where one can hold the text as written, else an escaped one
    const oddEnd = /(^|[^\\])(\\\\)*\\$/.test(s);
    if (!oddEnd && !/["\n\r]/.test(s)) return 'r"' + s + '"';
    if (!oddEnd && !s.includes('"""') && !s.endsWith('"')) return 'r"""' + s + '"""';
    if (!oddEnd && !s.includes("'''") && !s.endsWith("'")) return "r'''" + s + "'''";
    return JSON.stringify(s);
  }

  function toPy(value, indent) {
    const pad = "    ".repeat(indent);
    const inner = "    ".repeat(indent + 1);
    if (value === null) return "None";
    if (value === true) return "True";
    if (value === false) return "False";
    if (typeof value === "string") return JSON.stringify(value);
    if (typeof value === "number") return String(value);
    if (Array.isArray(value)) {
      if (!value.length) return "[]";
      return "[\n" + value.map((v) => inner + toPy(v, indent + 1) + ",\n").join("") + pad + "]";
    }
    const keys = Object.keys(value);
    if (!keys.length) return "{}";
    return "{\n" + keys.map((k) => `${inner}${JSON.stringify(k)}: ${toPy(value[k], indent + 1)},\n`).join("") + pad + "}";
  }

  function pythonCode() {
    const kind = $("kind").value;
    const text = $("constraint").value;
    const imports = ["import openai", "", "import outlines_like as ol"];
    const before = [];
    let typeExpr = null;
    if (kind === "int") typeExpr = "int";
    else if (kind === "choice") {
      imports.splice(0, 0, "from typing import Literal", "");
      const choices = text.split("\n").filter((c) => c.length > 0);
      typeExpr = "Literal[" + choices.map((c) => JSON.stringify(c)).join(", ") + "]";
    } else if (kind === "regex") {
      imports.push("from outlines_like.types import Regex");
      typeExpr = `Regex(${pyStr(text)})`;
    } else if (kind === "json") {
      imports.push("from outlines_like.types import JsonSchema");
      let schema;
      try {
        schema = toPy(JSON.parse(text), 0);
      } catch (err) {
        schema = pyStr(text);
      }
      before.push("schema = " + schema, "");
      typeExpr = "JsonSchema(schema)";
    } else if (kind === "fields") {
      const lines = text.split("\n").map((l) => l.replace(/#.*$/, "").trim()).filter(Boolean);
      if (lines.some((l) => l.includes("Literal["))) imports.splice(0, 0, "from typing import Literal", "");
      imports.splice(imports.indexOf("import openai") + 1, 0, "import pydantic");
      before.push("class Answer(pydantic.BaseModel):", ...lines.map((l) => "    " + l), "", "");
      typeExpr = "Answer";
    } else if (kind === "grammar") {
      imports.push("from outlines_like.types import CFG");
      typeExpr = $("syntax").value === "ebnf" ? `CFG(${pyStr(text)}, "ebnf")` : `CFG(${pyStr(text)})`;
    }
    const base = location.origin + "/v1";
    const key = $("api_key").value ? '"<your API key>"' : '"-"';
    const args = [JSON.stringify($("prompt").value)];
    if (typeExpr) args.push(typeExpr);
    for (const [k, v] of Object.entries(settings())) args.push(`${k}=${v}`);
    const call = kind === "fields" ? "model.parse" : "model";
    return [
      ...imports,
      "",
      `client = openai.OpenAI(base_url=${JSON.stringify(base)}, api_key=${key})`,
      "model = ol.from_server(client)",
      "",
      ...before,
      `result = ${call}(`,
      ...args.map((a) => "    " + a + ","),
      ")",
      "print(result)",
      "",
    ].join("\n");
  }

  async function copyPython() {
    const code = pythonCode();
    const pre = $("python");
    pre.textContent = code;
    pre.hidden = false;
    let copied = false;
    try {
      await navigator.clipboard.writeText(code);
      copied = true;
    } catch (err) {
      const range = document.createRange();
      range.selectNodeContents(pre);
      const sel = window.getSelection();
      sel.removeAllRanges();
      sel.addRange(range);
      copied = document.execCommand && document.execCommand("copy");
    }
    $("copy").textContent = copied ? "Copied ✓" : "Select and copy ↓";
    setTimeout(() => ($("copy").textContent = "Copy as Python"), 1500);
  }

  // ---------------------------------------------------------------- wiring

  $("kind").addEventListener("change", showKind);
  $("syntax").addEventListener("change", showKind);
  $("constraint").addEventListener("input", () => scheduleCheck());
  $("run").addEventListener("click", run);
  $("stop").addEventListener("click", () => controller && controller.abort());
  $("copy").addEventListener("click", copyPython);
  $("api_key").value = sessionStorage.getItem("outlines-like-api-key") || "";
  $("api_key").addEventListener("change", () => {
    sessionStorage.setItem("outlines-like-api-key", $("api_key").value);
    loadModels().then(() => scheduleCheck(0));
  });
  loadModels().then(showKind);
})();
