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

This module plays the tasks; the settings and the tasks they select are in :mod:`.config`, the result files in
:mod:`.result_files`, the scoring in :mod:`.scoring` and the HTTP client in :mod:`.openai_http`.
"""

from __future__ import annotations

import json
import os
import queue
import sys
import threading
from dataclasses import asdict
from typing import Any, Callable

from seal_verl.atomic import atomic_write_text

from ..environment.env import BFCLEnv
from ..environment.tasks import CATEGORIES, BFCLTask
from .config import EvalConfig, EvalError, select_tasks
from .openai_http import ChatClient, RequestRejected, ServerError, ServerUnreachable
from .result_files import INFERENCE_ERROR_PREFIX, ResultStore, is_inference_error
from .scoring import EvalSummary, score

CONFIG_FILE = "eval_config.json"


# ---------------------------------------------------------------------------------------------- prompts

def prompt_rendering(call_format: str, backbone: str | None = None):
    """The prompt-mode rendering of the agent loops (``env_wrappers.bfcl.environment.prompts``), so that a
    served model sees the same text as in verl's validation. ``backbone`` ``qwen3...``: Qwen3's template writes no
    default system line in front of the tools (Qwen2.5's does).

    Returns ``(system_prompt(task) -> str, reveal(task, turn, msgs, revealed_tools) -> msgs)``.
    """
    from ..environment import prompts

    qwen3 = (backbone or "").lower().startswith("qwen3")

    def system_prompt(task: BFCLTask) -> str:
        if call_format == "python":
            return prompts.prompt_mode_system_prompt(prompts.initial_docs(task))
        # BFCL's own docs, as the agent loop hands them to the chat template's tools= (not OpenAI tool objects)
        if qwen3:
            return qwen_tool_system_prompt(prompts.initial_docs(task), system=None)
        return qwen_tool_system_prompt(prompts.initial_docs(task))

    def reveal(task: BFCLTask, turn: int, msgs: list, revealed_tools: list) -> list:
        return prompts.reveal_messages(task, turn, msgs, revealed_tools, call_format)

    return system_prompt, reveal


def qwen_tool_system_prompt(tools: list[dict], system: str | None = "You are Qwen, created by Alibaba Cloud. "
                            "You are a helpful assistant.") -> str:
    """The system turn Qwen2.5's chat template renders for ``tools`` (``system`` None: Qwen3's, which starts at the
    tool block; the text BFCL's Qwen handler quotes)."""
    lines = "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
    return ((system + "\n\n" if system is not None else "") + "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
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
        system_prompt, reveal = rendering or prompt_rendering(fmt, cfg.backbone)
        messages.insert(0, {"role": "system", "content": system_prompt(task)})
    result: list[list] = [[]]
    while True:
        if stop is not None and stop.is_set():
            raise Stopped()
        payload: dict[str, Any] = {"model": cfg.model, "messages": messages, "temperature": cfg.temperature}
        if cfg.max_tokens:
            payload["max_tokens"] = cfg.max_tokens
        if cfg.seed is not None:
            payload["seed"] = cfg.seed
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



# ---------------------------------------------------------------------------------------------- the run

def run_eval(cfg: EvalConfig, client: ChatClient | None = None, log: Callable[[str], None] | None = None) -> EvalSummary:
    """Evaluate, write the three outputs, return the summary. Raises :class:`EvalError` on bad input."""
    log = log or _to_stderr
    fmt, tasks, client, rendering = _start(cfg, client)
    categories = sorted({t.category for t in tasks}, key=CATEGORIES.index)
    store = ResultStore(cfg.out, cfg.model)
    order = {t.id: i for i, t in enumerate(tasks)}
    todo = _tasks_to_play(store, tasks, categories, order, log)
    run = _Run(cfg, client, store, rendering, log)
    interrupted = run.play_all(todo, save=lambda: store.compact(categories, order))
    written = store.load(categories)
    missing = [t.id for t in tasks if t.id not in written]
    if run.fatal:
        raise EvalError(run.fatal[0] + f"; {len(tasks) - len(missing)} of {len(tasks)} task(s) are saved, "
                        "re-run to continue")

    summary = score(cfg, tasks, store, fmt)
    summary.n_run, summary.n_skipped, summary.n_errors = len(todo), len(tasks) - len(todo), run.errors
    summary.n_requested, summary.missing = len(tasks), missing
    summary.interrupted = interrupted
    return summary


def _to_stderr(line: str) -> None:
    print(line, file=sys.stderr)


def _start(cfg: EvalConfig, client: ChatClient | None) -> tuple:
    """Everything checked before the first task is played: the settings, the selected tasks, the server and
    the out folder's record of an earlier run. Returns ``(call format, tasks, client, prompt rendering)``."""
    cfg.validate()
    fmt = cfg.resolved_call_format()
    tasks = select_tasks(cfg)
    if not tasks:
        raise EvalError("no task selected (check --split, --category and --ids)")
    if client is None:
        client = ChatClient(cfg.base_url, api_key=cfg.api_key, timeout_s=cfg.timeout_s, retries=cfg.retries,
                            backoff_s=cfg.backoff_s)
    _check_server(client, cfg.model)
    rendering = prompt_rendering(fmt, cfg.backbone) if fmt != "fc" else None
    os.makedirs(cfg.out, exist_ok=True)
    _check_config(cfg, fmt)
    return fmt, tasks, client, rendering


def _tasks_to_play(store: ResultStore, tasks: list[BFCLTask], categories: list, order: dict, log) -> list:
    """The selected tasks without a result line yet (an inference-error line is played again)."""
    # A crash can leave a torn last line: rewrite the files clean first, or the next append would extend it.
    store.compact(categories, order)
    existing = store.load(categories)
    todo = [t for t in tasks if t.id not in existing or is_inference_error(existing[t.id])]
    n_skipped = len(tasks) - len(todo)
    if n_skipped:
        log(f"resuming: {n_skipped} task(s) already in {os.path.dirname(store.path(categories[0]))}")
    return todo


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
        for key, new in (("model", cfg.model), ("call_format", fmt), ("seed", cfg.seed)):
            if old.get(key) != new:
                raise EvalError(f"{path}: field {key!r} is {old.get(key)!r} but this run uses {new!r}; "
                                "choose another --out to compare settings")
    record = {k: v for k, v in asdict(cfg).items() if k not in ("api_key", "progress")}
    record["call_format"] = fmt
    atomic_write_text(path, json.dumps(record, indent=2) + "\n")



class _Run:
    """The tasks of one run played by ``cfg.concurrency`` threads: what they share (the queue of tasks, the stop
    flag, why the run stopped, the count of inference errors) and what each thread does."""

    def __init__(self, cfg: EvalConfig, client: ChatClient, store: ResultStore, rendering, log):
        self.cfg, self.client, self.store, self.rendering, self.log = cfg, client, store, rendering, log
        self.stop = threading.Event()
        self.fatal: list[str] = []  # why the run stopped early (the first reason is reported)
        self.errors = 0  # tasks recorded as inference errors
        self._errors_lock = threading.Lock()
        self.jobs: queue.Queue = queue.Queue()
        self.finished: queue.Queue = queue.Queue()

    def _count_error(self) -> None:
        with self._errors_lock:
            self.errors += 1

    def _halt(self, reason: str) -> None:
        self.fatal.append(reason)
        self.stop.set()

    def play(self, task: BFCLTask) -> Any:
        """The task's result, or its inference-error entry; None when the run is stopping."""
        try:
            return run_task(self.client, task, self.cfg, self.stop, self.rendering)
        except Stopped:
            return None
        except ServerUnreachable as exc:
            self._halt(str(exc))
            return None
        except (ServerError, RequestRejected) as exc:
            detail = str(exc)
        except BaseException as exc:  # noqa: BLE001 - a bug or a hostile answer: fail this task, keep going
            detail = f"{type(exc).__name__}: {exc}"[:500]
        self._count_error()
        return INFERENCE_ERROR_PREFIX + _printable(detail)

    def write(self, task: BFCLTask, result: Any) -> None:
        """Append the task's line; a result that cannot be written is recorded as the task's inference error,
        and a file that cannot be written stops the run (the task is then reported missing)."""
        try:
            self.store.append(task, result)
            return
        except OSError as exc:
            self._halt(f"cannot write the results of {task.id}: {exc.strerror or exc}")
            return
        except BaseException as exc:  # noqa: BLE001 - e.g. text the file's encoding cannot hold
            reason = f"{type(exc).__name__}: {exc}"
        if not is_inference_error(result):
            self._count_error()
        try:
            self.store.append(task, INFERENCE_ERROR_PREFIX
                              + _printable(f"the answer could not be written ({reason})"[:500]))
        except OSError as exc:
            self._halt(f"cannot write the results of {task.id}: {exc.strerror or exc}")
        except BaseException as exc:  # noqa: BLE001 - the task stays missing and is named at the end
            self.log(f"warning: task {task.id} could not be written ({type(exc).__name__}: {exc})"[:500])

    def work(self) -> None:
        """One thread's loop. A thread never dies with tasks queued: every task ends written, or missing and
        reported."""
        while not self.stop.is_set():
            try:
                task = self.jobs.get_nowait()
            except queue.Empty:
                return
            result = self.play(task)
            if result is None:
                return
            self.write(task, result)
            self.finished.put(task.id)

    def play_all(self, todo: list[BFCLTask], save: Callable[[], None]) -> bool:
        """Play ``todo`` on the threads with a progress bar, then ``save`` (also after Ctrl-C); whether the run
        was interrupted. A second Ctrl-C while saving is raised (what is on disk stays: writes are atomic)."""
        from tqdm import tqdm

        for t in todo:
            self.jobs.put(t)
        threads = [threading.Thread(target=self.work, daemon=True, name=f"bfcl-eval-{i}")
                   for i in range(min(self.cfg.concurrency, max(1, len(todo))))]
        interrupted = False
        bar = tqdm(total=len(todo), desc="evaluating", unit="task", disable=not self.cfg.progress or not todo,
                   file=sys.stderr)
        try:
            try:
                for th in threads:
                    th.start()
                while any(th.is_alive() for th in threads):
                    try:
                        self.finished.get(timeout=0.2)
                        bar.update(1)
                    except queue.Empty:
                        pass
                while not self.finished.empty():
                    self.finished.get_nowait()
                    bar.update(1)
            except KeyboardInterrupt:
                interrupted = True
                self.stop.set()
                self.log("interrupted: finished tasks are saved; re-run the same command to continue")
            finally:
                bar.close()
                save()
        except KeyboardInterrupt:  # a second Ctrl-C while saving: what is on disk stays (writes are atomic)
            self.stop.set()
            raise
        return interrupted


def _printable(text: str) -> str:
    """``text`` with anything UTF-8 cannot hold (lone surrogates) escaped, so that the line can be written."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")

