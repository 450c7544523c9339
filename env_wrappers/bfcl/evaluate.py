"""Held-out BFCL V3 multi-turn evaluation against any OpenAI-compatible chat-completions server.

The protocol is BFCL's multi-turn inference (what ``bfcl generate`` does): every user turn of a task in order;
within a turn the model is called until it answers without a tool call, or a message cannot be decoded, or
the per-turn step limit (20) is exceeded, which force-terminates the task; miss_func functions are added at
their turn. No SEAL interface: the model sees the task, the tools and the tool results, nothing else.
Greedy by default (temperature 0, one sample).

Two modes:

- ``fc``: tools in the request's ``tools`` field, calls from ``tool_calls`` (a vLLM server started with
  ``--enable-auto-tool-choice --tool-call-parser hermes``). Revealed functions join the ``tools`` list, and
  the reveal turn's user message is BFCL's reveal text (BFCL's FC handlers do the same). Each step is written
  as BFCL's FC handlers write it: ``[{name: arguments_json}, ...]``, or the text of a plain answer.
- ``prompt``: the backbone's own call text in plain messages: ``json`` (Qwen ``<tool_call>`` blocks, the
  Qwen2.5 tool system prompt) or ``python`` (BFCL's prompt-mode system prompt and Python call lists). Tool
  results go back as ``tool`` messages; revealed docs are written in front of BFCL's reveal text. The
  rendering is the one the ``bfcl`` evaluation agent loop uses (see :func:`prompt_rendering`).

Outputs in ``--out``:

- ``result/<model>/multi_turn/<BFCL prefix>_multi_turn_<category>_result.json``: one JSON line per task,
  ``{"id", "result": [turn][step]}``, the layout ``bfcl generate`` writes and ``bfcl evaluate`` reads (the
  file prefix is the installed bfcl-eval's ``VERSION_PREFIX``);
- ``labels.jsonl``: ``{"id", "category", "valid", "labels"[, "error_type"]}`` as ``seal-verl diagnose``;
- ``scores.json``: per-category accuracy (official semantics), their unweighted mean, and the protocol;
- ``eval_config.json``: the settings of the run (a resumed run must use the same mode and call format).

Every task's line is appended and flushed as soon as the task ends: Ctrl-C or a crash loses only tasks in
flight, and a re-run skips every task already written (an inference-error entry is retried). Model output is
never evaluated: calls are decoded with literal-only parsers and dispatched on the task's own instances.
"""

from __future__ import annotations

import json
import math
import os
import queue
import threading
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from seal_verl.atomic import atomic_write_text

from .env import MAX_STEPS_PER_TURN, BFCLEnv
from .openai_http import ChatClient, RequestRejected, ServerError, ServerUnreachable, check_base_url
from .tasks import CATEGORIES, BFCLTask, load_split, load_tasks

MODES = ("fc", "prompt")
SPLITS = ("eval", "train", "all")
#: Backbones whose prompt-mode call format is known; anything else needs --call-format.
BACKBONE_CALL_FORMAT = {"qwen2.5": "json", "qwen": "json", "hermes": "json", "llama3.1": "python",
                        "toolace": "python", "bfcl": "python"}
#: BFCL's prefix for a task that failed at inference; ``bfcl evaluate`` scores it as an inference error.
INFERENCE_ERROR_PREFIX = "Error during inference: "
CONFIG_FILE = "eval_config.json"


class EvalError(Exception):
    """A one-line, user-facing reason why the evaluation cannot run (bad option, server, or out folder)."""


@dataclass
class EvalConfig:
    base_url: str
    model: str
    out: str
    split: str = "eval"
    categories: list = field(default_factory=list)
    ids: list = field(default_factory=list)
    mode: str = "fc"
    call_format: str | None = None  # prompt mode: json | python (default from the backbone)
    backbone: str | None = None
    concurrency: int = 4
    temperature: float = 0.0
    max_tokens: int | None = None
    api_key: str | None = None
    timeout_s: float = 600.0
    retries: int = 4
    backoff_s: float = 1.0
    max_steps_per_turn: int = MAX_STEPS_PER_TURN
    progress: bool = True

    def resolved_call_format(self) -> str:
        """The format steps are written and judged in: ``fc``, or the prompt-mode call format."""
        if self.mode not in MODES:
            raise EvalError(f"--mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        if self.mode == "fc":
            if self.call_format not in (None, "fc"):
                raise EvalError("--call-format applies to --mode prompt only")
            return "fc"
        if self.call_format:
            if self.call_format not in ("json", "python"):
                raise EvalError(f"--call-format must be json or python, got {self.call_format!r}")
            return self.call_format
        if self.backbone:
            key = self.backbone.lower()
            fmt = next((v for k, v in BACKBONE_CALL_FORMAT.items() if key.startswith(k)), None)
            if fmt is None:
                raise EvalError(f"unknown --backbone {self.backbone!r} (known: {', '.join(BACKBONE_CALL_FORMAT)}); "
                                "give --call-format json|python instead")
            return fmt
        return "json"

    def validate(self) -> None:
        problem = check_base_url(self.base_url)
        if problem:
            raise EvalError(problem)
        if not _is_number(self.timeout_s) or not math.isfinite(self.timeout_s) or self.timeout_s <= 0:
            raise EvalError(f"--timeout must be a number of seconds > 0, got {self.timeout_s!r}")
        if not _is_number(self.temperature) or not math.isfinite(self.temperature) or self.temperature < 0:
            raise EvalError(f"--temperature must be a number >= 0, got {self.temperature!r}")
        if not _is_number(self.backoff_s) or not math.isfinite(self.backoff_s) or self.backoff_s < 0:
            raise EvalError(f"back-off must be a number of seconds >= 0, got {self.backoff_s!r}")
        for name, value, low in (("--concurrency", self.concurrency, 1), ("--retries", self.retries, 0),
                                 ("max_steps_per_turn", self.max_steps_per_turn, 1)):
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise EvalError(f"{name} must be an integer >= {low}, got {value!r}")
        if self.max_tokens is not None and (not isinstance(self.max_tokens, int) or self.max_tokens < 1):
            raise EvalError(f"--max-tokens must be an integer >= 1, got {self.max_tokens!r}")
        if self.split not in SPLITS:
            raise EvalError(f"--split must be one of {', '.join(SPLITS)}, got {self.split!r}")
        bad = [c for c in self.categories if _full_category(c) not in CATEGORIES]
        if bad:
            raise EvalError(f"unknown --category {bad[0]!r} (known: {', '.join(c[11:] for c in CATEGORIES)})")
        if not self.model:
            raise EvalError("--model must not be empty")
        self.resolved_call_format()


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _full_category(name: str) -> str:
    return name if name.startswith("multi_turn_") else f"multi_turn_{name}"


def select_tasks(cfg: EvalConfig) -> list[BFCLTask]:
    """The tasks to evaluate, in a stable order: the split (or ``--ids``), filtered by ``--category``."""
    if cfg.ids:
        try:
            tasks = load_tasks(list(cfg.ids))
        except KeyError as exc:
            raise EvalError(str(exc).strip("'\"")) from None
        chosen = list(tasks.values())
    else:
        all_tasks = load_tasks()
        if cfg.split == "all":
            ids = list(all_tasks)
        else:
            ids = load_split()[cfg.split]
        chosen = [all_tasks[i] for i in ids]
    if cfg.categories:
        wanted = {_full_category(c) for c in cfg.categories}
        chosen = [t for t in chosen if t.category in wanted]
    order = {c: i for i, c in enumerate(CATEGORIES)}
    return sorted(chosen, key=lambda t: (order[t.category], int(t.id.rsplit("_", 1)[1])))


# ---------------------------------------------------------------------------------------------- layout

def version_prefix() -> str:
    """The result-file prefix of the installed bfcl-eval (``BFCL_v4`` for 2026.3.23)."""
    try:
        from bfcl_eval.constants.category_mapping import VERSION_PREFIX
        return VERSION_PREFIX
    except Exception:  # noqa: BLE001 - an unexpected layout of the package: keep the known prefix
        return "BFCL_v4"


def model_dir_name(model: str) -> str:
    """BFCL's folder name for a model: ``/`` replaced by ``_``."""
    return model.replace("/", "_")


def result_path(out: str, model: str, category: str) -> str:
    return os.path.join(out, "result", model_dir_name(model), "multi_turn",
                        f"{version_prefix()}_{category}_result.json")


def bfcl_id_file(split: str = "eval", categories: list | None = None, ids: list | None = None) -> dict[str, list[str]]:
    """The ``test_case_ids_to_generate.json`` content that restricts ``bfcl generate --run-ids`` to a split (or
    to the given task ids): ``{category: [ids]}`` for the four multi-turn categories (BFCL skips categories with
    an empty list)."""
    if split not in SPLITS:
        raise EvalError(f"--split must be one of {', '.join(SPLITS)}, got {split!r}")
    cfg = EvalConfig(base_url="http://unused", model="unused", out="", split=split, categories=list(categories or []),
                     ids=list(ids or []))
    cfg.validate()
    out: dict[str, list[str]] = {c: [] for c in CATEGORIES}
    for t in select_tasks(cfg):
        out[t.category].append(t.id)
    return out


# ---------------------------------------------------------------------------------------------- prompts

def prompt_rendering(call_format: str):
    """The prompt-mode rendering of the agent loops (``env_wrappers.bfcl.prompts``), so that a served model sees
    the same text as in verl's validation.

    Returns ``(system_prompt(task) -> str, reveal(task, turn, msgs, revealed_tools) -> msgs)``.
    """
    from env_wrappers.bfcl import prompts

    def system_prompt(task: BFCLTask) -> str:
        if call_format == "python":
            return prompts.prompt_mode_system_prompt(prompts.initial_docs(task))
        # BFCL's own docs, as the agent loop hands them to the chat template's tools= (not OpenAI tool objects)
        return qwen_tool_system_prompt(prompts.initial_docs(task))

    def reveal(task: BFCLTask, turn: int, msgs: list, revealed_tools: list) -> list:
        return prompts.reveal_messages(task, turn, msgs, revealed_tools, call_format)

    return system_prompt, reveal


def qwen_tool_system_prompt(tools: list[dict], system: str = "You are Qwen, created by Alibaba Cloud. "
                            "You are a helpful assistant.") -> str:
    """The system turn Qwen2.5's chat template renders for ``tools`` (the text BFCL's Qwen handler quotes)."""
    lines = "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
    return (system + "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
            "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n" + lines +
            "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
            "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
            "<args-json-object>}\n</tool_call>")


# ---------------------------------------------------------------------------------------------- one task

class Stopped(Exception):
    """The run is being interrupted: abandon this task without writing it."""


def _fc_step(message: dict) -> tuple[Any, list]:
    """(result step, tool_calls) of an fc answer: BFCL's FC form ``[{name: arguments}]`` or the text."""
    tool_calls = message.get("tool_calls") or []
    if not isinstance(tool_calls, list) or not tool_calls:
        return str(message.get("content") or ""), []
    step, kept = [], []
    for i, tc in enumerate(tool_calls):
        fn = tc.get("function") if isinstance(tc, dict) else None
        if not isinstance(fn, dict):
            step.append({"": str(tc)[:200]})  # not a call object: undecodable, as BFCL would find it
            continue
        args = fn.get("arguments")
        if not isinstance(args, str):
            args = json.dumps(args)
        name = str(fn.get("name") or "")
        step.append({name: args})
        kept.append({"id": str(tc.get("id") or f"call_{i}"), "type": "function",
                     "function": {"name": name, "arguments": args}})
    return step, kept


def run_task(client: ChatClient, task: BFCLTask, cfg: EvalConfig, stop: threading.Event | None = None,
             rendering=None) -> list:
    """Play one task against the server; returns its ``bfcl generate`` result ``[turn][step]``.

    Raises :class:`ServerError` when the server keeps failing (the caller records an inference error) and
    :class:`Stopped` when ``stop`` is set.
    """
    fmt = cfg.resolved_call_format()
    env = BFCLEnv(task, call_format=fmt, max_steps_per_turn=cfg.max_steps_per_turn)
    messages: list[dict] = [dict(m) for m in env.reset()]
    tools = task.tools(upto_turn=0) if fmt == "fc" else None
    if fmt != "fc":
        system_prompt, reveal = rendering or prompt_rendering(fmt)
        messages.insert(0, {"role": "system", "content": system_prompt(task)})
    result: list[list] = [[]]
    while True:
        if stop is not None and stop.is_set():
            raise Stopped()
        payload: dict[str, Any] = {"model": cfg.model, "messages": messages, "temperature": cfg.temperature}
        if cfg.max_tokens:
            payload["max_tokens"] = cfg.max_tokens
        if tools:
            payload["tools"] = tools
        answer = client.chat(payload)
        if fmt == "fc":
            step, tool_calls = _fc_step(answer)
            assistant: dict[str, Any] = {"role": "assistant", "content": answer.get("content") or ""}
            if tool_calls:
                assistant["tool_calls"] = tool_calls
        else:
            step, tool_calls = str(answer.get("content") or ""), []
            assistant = {"role": "assistant", "content": step}
        result[-1].append(step)
        messages.append(assistant)
        sr = env.step(step)
        if sr.turn_done:
            if sr.episode_done:
                return result
            result.append([])
            turn = env.turn
            nxt = [dict(m) for m in (sr.next_user or [])]
            if sr.revealed_tools:
                if fmt == "fc":
                    tools = list(tools or []) + list(sr.revealed_tools)
                else:
                    nxt = reveal(task, turn, nxt, sr.revealed_tools)
            messages.extend(nxt)
            continue
        messages.extend(_tool_messages(sr, tool_calls, fmt))


def _tool_messages(sr, tool_calls: list, fmt: str) -> list[dict]:
    """One ``tool`` message per result shown; in fc mode each answers its ``tool_call_id``."""
    if fmt != "fc":
        return [{"role": "tool", "name": tr.name or "tool", "content": tr.content} for tr in sr.tool_results]
    answered = [i for i, rec in enumerate(sr.attempt.calls) if rec.result is not None] if sr.attempt else []
    if len(answered) != len(sr.tool_results):
        answered = list(range(len(sr.tool_results)))
    out = []
    for i, tr in zip(answered, sr.tool_results):
        call_id = tool_calls[i]["id"] if i < len(tool_calls) else f"call_{i}"
        out.append({"role": "tool", "tool_call_id": call_id, "name": tr.name or "tool", "content": tr.content})
    return out


# ---------------------------------------------------------------------------------------------- results

class ResultStore:
    """The per-category result files: read what exists, append one line per finished task (thread-safe)."""

    def __init__(self, out: str, model: str):
        self.out, self.model = out, model
        self._lock = threading.Lock()

    def path(self, category: str) -> str:
        return result_path(self.out, self.model, category)

    def load(self, categories) -> dict[str, Any]:
        """``{id: result}`` of the entries already written (unreadable lines skipped: they are redone)."""
        done: dict[str, Any] = {}
        for cat in categories:
            p = self.path(cat)
            if not os.path.exists(p):
                continue
            with open(p, "rb") as f:
                for raw in f:
                    try:
                        obj = json.loads(raw.decode("utf-8"))
                    except (UnicodeDecodeError, ValueError):
                        continue
                    if isinstance(obj, dict) and isinstance(obj.get("id"), str) and "result" in obj:
                        done[obj["id"]] = obj["result"]
        return done

    def append(self, task: BFCLTask, result: Any) -> None:
        """Raises (before touching the file) when the line cannot be encoded, e.g. text with a lone surrogate."""
        line = (json.dumps({"id": task.id, "result": result}, ensure_ascii=False) + "\n").encode("utf-8")
        with self._lock:
            p = self.path(task.category)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            with open(p, "ab") as f:
                f.write(line)
                f.flush()
                os.fsync(f.fileno())

    def compact(self, categories, order: dict[str, int]) -> None:
        """Rewrite each file atomically: one line per id (the last written wins), sorted as BFCL sorts."""
        with self._lock:
            for cat in categories:
                p = self.path(cat)
                if not os.path.exists(p):
                    continue
                entries = {k: v for k, v in self.load([cat]).items()}
                ids = sorted(entries, key=lambda i: (order.get(i, 1 << 30), i))
                atomic_write_text(p, "".join(json.dumps({"id": i, "result": entries[i]}, ensure_ascii=False) + "\n"
                                             for i in ids))


def is_inference_error(result: Any) -> bool:
    return isinstance(result, str)


# ---------------------------------------------------------------------------------------------- the run

@dataclass
class EvalSummary:
    scores: dict
    rows: list  # (category, valid, labels)
    n_run: int
    n_skipped: int
    n_errors: int
    interrupted: bool = False
    n_requested: int = 0
    missing: list = field(default_factory=list)  # requested task ids with no line in the result files

    @property
    def n_missing(self) -> int:
        return len(self.missing)

    @property
    def n_written(self) -> int:
        return self.n_requested - len(self.missing)


def _check_server(client: ChatClient, model: str) -> None:
    try:
        served = client.models()
    except ServerError as exc:
        raise EvalError(str(exc)) from None
    if model not in served:
        raise EvalError(f"the server at {client.base_url} does not serve model {model!r} "
                        f"(it serves: {', '.join(served) or 'nothing'})")


def _check_config(cfg: EvalConfig, fmt: str) -> None:
    path = os.path.join(cfg.out, CONFIG_FILE)
    if os.path.exists(path):
        try:
            with open(path) as f:
                old = json.load(f)
        except (OSError, ValueError) as exc:
            raise EvalError(f"{path}: unreadable ({exc}); remove it or choose another --out") from None
        for key, new in (("model", cfg.model), ("call_format", fmt)):
            if old.get(key) != new:
                raise EvalError(f"{path}: field {key!r} is {old.get(key)!r} but this run uses {new!r}; "
                                "choose another --out to compare settings")
    record = {k: v for k, v in asdict(cfg).items() if k not in ("api_key", "progress")}
    record["call_format"] = fmt
    atomic_write_text(path, json.dumps(record, indent=2) + "\n")


def run_eval(cfg: EvalConfig, client: ChatClient | None = None, log: Callable[[str], None] | None = None) -> EvalSummary:
    """Evaluate, write the three outputs, return the summary. Raises :class:`EvalError` on bad input."""
    import sys

    from tqdm import tqdm

    log = log or (lambda s: print(s, file=sys.stderr))
    cfg.validate()
    fmt = cfg.resolved_call_format()
    tasks = select_tasks(cfg)
    if not tasks:
        raise EvalError("no task selected (check --split, --category and --ids)")
    if client is None:
        client = ChatClient(cfg.base_url, api_key=cfg.api_key, timeout_s=cfg.timeout_s, retries=cfg.retries,
                            backoff_s=cfg.backoff_s)
    _check_server(client, cfg.model)
    rendering = prompt_rendering(fmt) if fmt != "fc" else None
    os.makedirs(cfg.out, exist_ok=True)
    _check_config(cfg, fmt)

    categories = sorted({t.category for t in tasks}, key=CATEGORIES.index)
    store = ResultStore(cfg.out, cfg.model)
    order = {t.id: i for i, t in enumerate(tasks)}
    # A crash can leave a torn last line: rewrite the files clean first, or the next append would extend it.
    store.compact(categories, order)
    existing = store.load(categories)
    todo = [t for t in tasks if t.id not in existing or is_inference_error(existing[t.id])]
    n_skipped = len(tasks) - len(todo)
    if n_skipped:
        log(f"resuming: {n_skipped} task(s) already in {os.path.dirname(store.path(categories[0]))}")

    stop = threading.Event()
    fatal: list[str] = []
    errors = [0]
    errors_lock = threading.Lock()
    jobs: queue.Queue = queue.Queue()
    for t in todo:
        jobs.put(t)
    finished: queue.Queue = queue.Queue()

    def play(task: BFCLTask) -> Any:
        """The task's result, or its inference-error entry; None when the run is stopping."""
        try:
            return run_task(client, task, cfg, stop, rendering)
        except Stopped:
            return None
        except ServerUnreachable as exc:
            fatal.append(str(exc))
            stop.set()
            return None
        except (ServerError, RequestRejected) as exc:
            detail = str(exc)
        except BaseException as exc:  # noqa: BLE001 - a bug or a hostile answer: fail this task, keep going
            detail = f"{type(exc).__name__}: {exc}"[:500]
        with errors_lock:
            errors[0] += 1
        return INFERENCE_ERROR_PREFIX + _printable(detail)

    def write(task: BFCLTask, result: Any) -> None:
        """Append the task's line; a result that cannot be written is recorded as the task's inference error,
        and a file that cannot be written stops the run (the task is then reported missing)."""
        try:
            store.append(task, result)
            return
        except OSError as exc:
            fatal.append(f"cannot write the results of {task.id}: {exc.strerror or exc}")
            stop.set()
            return
        except BaseException as exc:  # noqa: BLE001 - e.g. text the file's encoding cannot hold
            reason = f"{type(exc).__name__}: {exc}"
        if not is_inference_error(result):
            with errors_lock:
                errors[0] += 1
        try:
            store.append(task, INFERENCE_ERROR_PREFIX + _printable(f"the answer could not be written ({reason})"[:500]))
        except OSError as exc:
            fatal.append(f"cannot write the results of {task.id}: {exc.strerror or exc}")
            stop.set()
        except BaseException as exc:  # noqa: BLE001 - the task stays missing and is named at the end
            log(f"warning: task {task.id} could not be written ({type(exc).__name__}: {exc})"[:500])

    def worker() -> None:
        # A worker never dies with tasks queued: every task ends written, or missing and reported.
        while not stop.is_set():
            try:
                task = jobs.get_nowait()
            except queue.Empty:
                return
            result = play(task)
            if result is None:
                return
            write(task, result)
            finished.put(task.id)

    threads = [threading.Thread(target=worker, daemon=True, name=f"bfcl-eval-{i}")
               for i in range(min(cfg.concurrency, max(1, len(todo))))]
    interrupted = False
    bar = tqdm(total=len(todo), desc="evaluating", unit="task", disable=not cfg.progress or not todo,
               file=sys.stderr)
    try:
        try:
            for th in threads:
                th.start()
            while any(th.is_alive() for th in threads):
                try:
                    finished.get(timeout=0.2)
                    bar.update(1)
                except queue.Empty:
                    pass
            while not finished.empty():
                finished.get_nowait()
                bar.update(1)
        except KeyboardInterrupt:
            interrupted = True
            stop.set()
            log("interrupted: finished tasks are saved; re-run the same command to continue")
        finally:
            bar.close()
            store.compact(categories, order)
    except KeyboardInterrupt:  # a second Ctrl-C while saving: what is on disk stays (writes are atomic)
        stop.set()
        raise
    written = store.load(categories)
    missing = [t.id for t in tasks if t.id not in written]
    if fatal:
        raise EvalError(fatal[0] + f"; {len(tasks) - len(missing)} of {len(tasks)} task(s) are saved, "
                        "re-run to continue")

    summary = score(cfg, tasks, store, fmt)
    summary.n_run, summary.n_skipped, summary.n_errors = len(todo), n_skipped, errors[0]
    summary.n_requested, summary.missing = len(tasks), missing
    summary.interrupted = interrupted
    return summary


def _printable(text: str) -> str:
    """``text`` with anything UTF-8 cannot hold (lone surrogates) escaped, so that the line can be written."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def score(cfg: EvalConfig, tasks: list[BFCLTask], store: ResultStore, fmt: str) -> EvalSummary:
    """Judge every selected task's written result; write ``labels.jsonl`` and ``scores.json``."""
    from seal_verl.report import summarise

    from .judge import judge_result

    categories = sorted({t.category for t in tasks}, key=CATEGORIES.index)
    written = store.load(categories)
    lines, rows = [], []
    for t in tasks:
        if t.id not in written:
            continue
        j = judge_result(t, written[t.id], call_format=fmt)
        rec = {"id": t.id, "category": t.category, "valid": j.valid, "labels": j.labels}
        if j.error_type:
            rec["error_type"] = j.error_type
        lines.append(json.dumps(rec) + "\n")
        rows.append((t.category, j.valid, j.labels))
    atomic_write_text(os.path.join(cfg.out, "labels.jsonl"), "".join(lines))
    stats = summarise(rows)
    cats = {c: {"accuracy": s.accuracy, "n": s.n_tasks, "n_valid": s.n_valid} for c, s in stats.items()}
    expected = {c: sum(1 for t in tasks if t.category == c) for c in categories}
    scores = {
        "categories": cats,
        "average": (sum(v["accuracy"] for v in cats.values()) / len(cats)) if cats else 0.0,
        "complete": all(cats.get(c, {}).get("n") == n for c, n in expected.items()),
        "label_counts": {c: dict(s.label_counts) for c, s in stats.items()},
        "protocol": {
            "benchmark": "BFCL V3 multi-turn", "split": "ids" if cfg.ids else cfg.split, "model": cfg.model,
            "mode": cfg.mode, "call_format": fmt, "temperature": cfg.temperature, "samples": 1,
            "max_steps_per_turn": cfg.max_steps_per_turn, "interface": "none (evaluation)",
            "semantics": "official BFCL (abstention turns unchecked)", "bfcl_eval_version": _bfcl_version(),
        },
    }
    atomic_write_text(os.path.join(cfg.out, "scores.json"), json.dumps(scores, indent=2) + "\n")
    return EvalSummary(scores=scores, rows=rows, n_run=0, n_skipped=0, n_errors=0)


def _bfcl_version() -> str | None:
    try:
        from importlib.metadata import version
        return version("bfcl-eval")
    except Exception:  # noqa: BLE001
        return None


def format_scores(summary: EvalSummary) -> str:
    from seal_verl.report import format_table, summarise

    return format_table(summarise(summary.rows))
