"""``seal-verl dry-run``: SEAL's whole closed loop on CPU, everything real except generation and the optimizer.

What runs, per training step ``t``:

1. a batch of training tasks of the environment (``DryRunConfig.env``, any registered one; BFCL by default:
   the SEAL split's train half) becomes parquet rows and goes through verl's real ``RLHFDataset`` and
   ``collate_fn`` into a ``DataProto``, repeated ``rollouts`` times (GRPO groups);
2. verl's real ``AgentLoopWorker`` (in-process) runs the training agent loop on every row (``seal_bfcl``;
   ``seal_env`` for other environments): a real episode of the environment under the real
   :class:`~env_wrappers.observation.SealObservationWrapper` with Omega_t, prompts rendered by verl's
   Continuous Token builder with the tiny local model's chat template;
3. the LLM is a :class:`ScriptedLLM`: it answers verl's ``generate(request_id, prompt_ids=...,
   sampling_params=...)`` with token ids of scripted text (ground-truth calls with injected failures of every
   label, proposed by the environment's ``failure_turns`` and kept only when the real verifier and Psi
   agree), encoded by the tiny model's tokenizer. The failure mix shifts over steps: early steps carry many
   invalid calls and argument errors, later steps mostly pass;
4. verl's real reward loop (``RewardLoopWorker`` + ``NaiveRewardManager``, in-process) calls the project's
   reward function (``reward_fns/bfcl_reward.py``, or ``reward_fns/seal_reward.py`` for other environments)
   with the trace from ``extra_fields``;
5. the trainer's advantage path: the SEAL weights of the glue's :class:`~seal_verl.verl_glue.driver.SealDriver`
   from the reward extras, activated as a ``WeightPlan`` around verl's own ``compute_advantage`` with the
   ``seal_grpo`` estimator (GRPO group normalisation, then ``w_j``);
6. the closed-loop update (``SealDriver.end_step`` -> ``seal_verl.loop.closed_loop_step``), the state saved
   to ``state_step_{t}.json``, and handed to the rollout side for step ``t+1``
   (:func:`seal_verl.verl_glue.agent_loop.set_state_source`, the in-process stand-in for the state actor).

At the end a small validation pass runs the evaluation loop on held-out tasks: no cue, ever.

Run folder: ``state_step_{k}.json`` (ClosedLoopState after step k), ``traces_step_{k}.jsonl`` (per rollout:
trace, labels, reward, w, cue tokens, the scripted plan), ``metrics.jsonl`` (one row per step),
``val_traces.jsonl``, ``config.json``; the tiny model under ``model/`` unless ``--model`` points elsewhere.

The scripted LLM finds the task of a request from the request id (the agent loops use
``"<task_id>/<uuid>"``) and the current user turn by locating the task's user-turn texts (the environment's
``user_turn_texts``) in the decoded prompt, so it stays in step with the environment also when a budget ends a turn early.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Optional

from env_wrappers.protocol import ABSTAIN_TEXT, CLOSING_TEXT  # noqa: F401 - the scripted texts, re-exported

TRAIN_LOOP = "seal_bfcl"
EVAL_LOOP = "bfcl"
#: The loops of any other environment (rows name their environment in ``extra_info.env``).
GENERIC_TRAIN_LOOP = "seal_env"
GENERIC_EVAL_LOOP = "env"
#: The environment the dry run and its helpers use unless told otherwise.
DEFAULT_ENV = "bfcl"


def environment(name: Optional[str] = None):
    """The registered environment ``name`` (default :data:`DEFAULT_ENV`)."""
    from env_wrappers.registry import get_environment

    return get_environment(name or DEFAULT_ENV)


def loop_names(env: Optional[str] = None) -> tuple[str, str]:
    """(training loop, evaluation loop) for an environment: BFCL keeps its own names."""
    return (TRAIN_LOOP, EVAL_LOOP) if (env or DEFAULT_ENV) == "bfcl" else (GENERIC_TRAIN_LOOP, GENERIC_EVAL_LOOP)
#: Failure targets a scripted rollout can be built to show, in the order used for tie-breaking.
TARGETS = (
    "pass",
    "invalid_tool_call",
    "argument_mismatch",
    "state_mismatch",
    "recovery_failure",
    "missing_tool_call",
    "response_mismatch",
    "spurious_tool_call",
)

#: Policy mix at the first and at the last step (linearly interpolated in between).
EARLY_MIX = {"pass": 0.10, "invalid_tool_call": 0.30, "argument_mismatch": 0.25, "state_mismatch": 0.05,
             "recovery_failure": 0.10, "missing_tool_call": 0.10, "response_mismatch": 0.05,
             "spurious_tool_call": 0.05}
LATE_MIX = {"pass": 0.60, "invalid_tool_call": 0.02, "argument_mismatch": 0.05, "state_mismatch": 0.08,
            "recovery_failure": 0.08, "missing_tool_call": 0.10, "response_mismatch": 0.02,
            "spurious_tool_call": 0.05}


# ============================================================================================================
# scripted plans: ground-truth calls with one injected failure, checked against the real verifier and Psi
# ============================================================================================================


@dataclass
class Plan:
    """What a scripted rollout says: per user turn, the assistant messages in order (the last is text).

    ``labels`` are the turn labels the real verifier + Psi give this plan when replayed offline through a
    fresh episode of the environment; the agent loop must reproduce them.
    """

    task_id: str
    target: str
    kind: str
    turn: Optional[int]
    fmt: str
    messages: list
    labels: list = field(default_factory=list)
    turns: list = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def replay_plan(task, messages: list[list[str]], fmt: str, env: Optional[str] = None):
    """Play ``messages`` through a fresh episode as the agent loop would; returns the trace."""
    env = environment(env).start(task, call_format=fmt, call_timeout_s=None)  # scripted, trusted calls: inline
    env.reset()
    while not env.done:
        k = env.turn
        turn_msgs = messages[k] if k < len(messages) else [CLOSING_TEXT]
        for text in list(turn_msgs) + [CLOSING_TEXT]:
            env.step(text)
            if env.done or env.turn != k:
                break
    return env.trace


def _judge(task, messages, fmt, env: Optional[str] = None) -> Optional[list]:
    """Psi's labels of a scripted rollout: replayed, verified (official semantics), diagnosed."""
    from seal_verl.diagnosis import diagnose

    try:
        trace = replay_plan(task, messages, fmt, env)
        verdict = environment(env).verify(task, trace, strict_abstention=False, call_timeout_s=None)
        return diagnose(trace, verdict.checks).labels
    except Exception:  # noqa: BLE001 - a candidate the environment cannot replay is just skipped
        return None


def find_plan(task, target: str, fmt: str, seed: int = 0, tries_per_turn: int = 8,
              max_injected: Optional[int] = None, env: Optional[str] = None) -> Optional[Plan]:
    """A plan whose offline replay carries ``target`` on every injected turn and ``pass`` elsewhere.

    Each eligible turn is searched on its own (the verifier judges a turn after a failure from the ground
    truth state, so turns are independent); the turns that work are then injected together (up to
    ``max_injected``), so a failing rollout fails on most of its turns, as a weak policy does.
    """
    environment_ = environment(env)
    base = environment_.reference_turns(task, fmt)
    if target == "pass":
        labels = _judge(task, base, fmt, env)
        if labels is None or any(lab != "pass" for lab in labels):
            return None
        return Plan(task_id=task.id, target=target, kind="ground_truth", turn=None, fmt=fmt, messages=base,
                    labels=labels)
    found: dict[int, tuple[str, list]] = {}
    tries: dict[int, int] = {}
    for kind, k, turn_msgs in environment_.failure_turns(task, target, fmt, seed):
        if k in found or tries.get(k, 0) >= tries_per_turn:
            continue
        tries[k] = tries.get(k, 0) + 1
        messages = [list(m) for m in base]
        messages[k] = turn_msgs
        labels = _judge(task, messages, fmt, env)
        if labels is not None and labels[k] == target and all(lab == "pass" for j, lab in enumerate(labels) if j != k):
            found[k] = (kind, turn_msgs)
    if not found:
        return None
    ks = sorted(found)[: max_injected or None]
    while ks:
        messages = [list(m) for m in base]
        for k in ks:
            messages[k] = found[k][1]
        labels = _judge(task, messages, fmt, env)
        if labels is not None and all((labels[j] == target) if j in ks else (labels[j] == "pass") for j in range(len(labels))):
            kinds = sorted({found[k][0] for k in ks})
            return Plan(task_id=task.id, target=target, kind="+".join(kinds), turn=ks[0], fmt=fmt,
                        messages=messages, labels=labels, turns=list(ks))
        ks = ks[:-1]
    return None


class PlanBook:
    """Plans per (task, target), searched once and cached."""

    def __init__(self, fmt: str, seed: int = 0, env: Optional[str] = None):
        self.fmt = fmt
        self.seed = seed
        self.env = env
        self._plans: dict[tuple[str, str], Optional[Plan]] = {}

    def get(self, task, target: str) -> Optional[Plan]:
        key = (task.id, target)
        if key not in self._plans:
            self._plans[key] = find_plan(task, target, self.fmt, self.seed, env=self.env)
        return self._plans[key]

    def available(self, task) -> dict[str, Plan]:
        return {t: p for t in TARGETS if (p := self.get(task, t)) is not None}


def mix_at(step: int, steps: int) -> dict[str, float]:
    """The policy's target distribution at ``step`` of ``steps`` (EARLY_MIX -> LATE_MIX)."""
    a = 0.0 if steps <= 1 else step / (steps - 1)
    return {t: (1 - a) * EARLY_MIX[t] + a * LATE_MIX[t] for t in TARGETS}


def draw_plans(book: PlanBook, task, n: int, mix: dict[str, float], rng: random.Random) -> list[Plan]:
    """``n`` plans for one task drawn from ``mix``; a target this task cannot show is redrawn among the rest
    (plans are searched lazily, only for targets that are drawn)."""
    out = []
    for _ in range(n):
        weights = dict(mix)
        while True:
            targets = [t for t in TARGETS if weights.get(t, 0.0) > 0]
            if not targets:
                out.append(book.get(task, "pass"))
                break
            t = rng.choices(targets, weights=[weights[x] for x in targets])[0]
            plan = book.get(task, t)
            if plan is not None:
                out.append(plan)
                break
            weights[t] = 0.0
    return out


# ============================================================================================================
# the scripted LLM server client
# ============================================================================================================


class ScriptedLLM:
    """Stands in for verl's ``LLMServerClient``: ``await generate(request_id, prompt_ids=..., sampling_params=...)``
    returns a ``TokenOutput`` with the token ids of the scripted text (tiny tokenizer) plus ``<|im_end|>``,
    cut to ``sampling_params["max_tokens"]`` like a real server.

    Plans are queued per task (:meth:`queue`); each new request of a task takes the next plan of its queue
    (or ``default`` when the queue is empty). ``records`` keeps, per request, the plan and the texts sent.
    """

    def __init__(self, tokenizer, tasks: dict, default=None, eos_token: str = "<|im_end|>",
                 env: Optional[str] = None):
        self.tokenizer = tokenizer
        self.tasks = tasks
        self.env = env
        self._turn_texts: dict[str, list[str]] = {}
        self.default = default  # callable task -> Plan
        self.eos_id = tokenizer.convert_tokens_to_ids(eos_token)
        self._queues: dict[str, list[Plan]] = {}
        self._req: dict[str, dict] = {}
        self.records: list[dict] = []
        self.calls = 0
        self.global_steps = 0

    def queue(self, task_id: str, plans: list[Plan]) -> None:
        self._queues.setdefault(task_id, []).extend(plans)

    def reset(self) -> None:
        self._queues.clear()
        self._req.clear()
        self.records.clear()

    def _turn_of(self, task, prompt_text: str) -> int:
        texts = self._turn_texts.get(task.id)
        if texts is None:
            texts = self._turn_texts[task.id] = environment(self.env).user_turn_texts(task)
        pos, turn = 0, -1
        for k, text in enumerate(texts):
            found = prompt_text.find(text, pos)
            if found < 0:
                break
            pos, turn = found + len(text), k
        return max(turn, 0)

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        from verl.workers.rollout.replica import TokenOutput

        self.calls += 1
        task_id = str(request_id).split("/", 1)[0]
        task = self.tasks[task_id]
        st = self._req.get(request_id)
        if st is None:
            q = self._queues.get(task_id)
            plan = q.pop(0) if q else (self.default(task) if self.default else None)
            if plan is None:
                raise RuntimeError(f"no scripted plan for task {task_id}")
            st = {"plan": plan, "turn": -1, "step": 0, "texts": [], "ids": [], "turns": [], "max_tokens": []}
            self._req[request_id] = st
            self.records.append({"request_id": request_id, "task_id": task_id, "plan": plan, "texts": st["texts"],
                                 "ids": st["ids"], "turns": st["turns"], "max_tokens": st["max_tokens"]})
        prompt_text = self.tokenizer.decode(list(prompt_ids), skip_special_tokens=False)
        turn = self._turn_of(task, prompt_text)
        if turn != st["turn"]:
            st["turn"], st["step"] = turn, 0
        msgs = st["plan"].messages[turn] if turn < len(st["plan"].messages) else []
        text = msgs[st["step"]] if st["step"] < len(msgs) else CLOSING_TEXT
        st["step"] += 1
        ids = self.tokenizer.encode(text, add_special_tokens=False) + [self.eos_id]
        limit = sampling_params.get("max_tokens")
        if limit is not None:
            ids = ids[: int(limit)]
        st["texts"].append(text)
        st["ids"].append(list(ids))
        st["turns"].append(turn)
        st["max_tokens"].append(limit)
        return TokenOutput(
            token_ids=ids,
            log_probs=[-0.5] * len(ids) if sampling_params.get("logprobs") else None,
            stop_reason="completed",
            num_preempted=0,
            extra_fields={"global_steps": self.global_steps, "min_global_steps": self.global_steps,
                          "max_global_steps": self.global_steps},
        )

    def record_for(self, trace: dict) -> Optional[dict]:
        """The request whose sent messages are exactly the attempts of ``trace`` (same task).

        Compared as decoded tokens (what the agent loop saw), so a message cut by a token budget still matches.
        """
        texts = [a["text"] for t in trace["turns"] for a in t["attempts"]]
        for rec in self.records:
            if rec["task_id"] != trace["task_id"] or len(rec["ids"]) != len(texts):
                continue
            sent = [self.tokenizer.decode(ids, skip_special_tokens=True) for ids in rec["ids"]]
            if sent == texts:
                return rec
        return None


# ============================================================================================================
# verl plumbing: config, dataset, worker, reward worker
# ============================================================================================================


def tiny_model(path: str) -> str:
    """The tiny random Qwen2 at ``path`` (made there once)."""
    from seal_verl.tiny_model import make_tiny_qwen

    if os.path.exists(os.path.join(path, "config.json")) and os.path.exists(os.path.join(path, "tokenizer.json")):
        return os.path.abspath(path)
    return make_tiny_qwen(path)


def reward_fn_path(env: Optional[str] = None) -> str:
    """The reward function file: ``bfcl_reward.py`` for BFCL (its recipes' file), else the generic one."""
    import reward_fns

    name = "bfcl_reward.py" if (env or DEFAULT_ENV) == "bfcl" else "seal_reward.py"
    return os.path.join(os.path.dirname(os.path.abspath(reward_fns.__file__)), name)


def write_agent_loop_yaml(path: str, call_format: str = "json", env: Optional[str] = None,
                          **loop_kwargs: Any) -> str:
    """The agent-loop YAML listing the training and evaluation loops of ``env`` with the given init kwargs."""
    import yaml

    entries = []
    classes = (("SealBFCLAgentLoop", "BFCLAgentLoop") if (env or DEFAULT_ENV) == "bfcl"
               else ("SealEnvAgentLoop", "EnvAgentLoop"))
    for name, cls in zip(loop_names(env), classes):
        entry = {"name": name, "_target_": f"seal_verl.verl_glue.agent_loop.{cls}", "call_format": call_format}
        entry.update({k: v for k, v in loop_kwargs.items() if v is not None})
        entries.append(entry)
    with open(path, "w") as f:
        yaml.safe_dump(entries, f, sort_keys=False)
    return path


def verl_config(model_path: str, *, agent_loop_yaml: Optional[str] = None, rollouts: int = 4,
                prompt_length: int = 16384, response_length: int = 8192, reward_path: Optional[str] = None,
                seal: Optional[dict] = None, overrides: Optional[list[str]] = None):
    """verl's own ``ppo_trainer`` config (Hydra compose) with what the dry run and the tests need."""
    import verl
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf, open_dict

    config_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    ov = [
        f"actor_rollout_ref.model.path={model_path}",
        "actor_rollout_ref.rollout.name=vllm",
        f"actor_rollout_ref.rollout.n={rollouts}",
        "actor_rollout_ref.rollout.agent.num_workers=1",
        f"actor_rollout_ref.rollout.agent.default_agent_loop={TRAIN_LOOP}",
        f"data.max_prompt_length={prompt_length}",
        f"data.max_response_length={response_length}",
        "data.dataloader_num_workers=0",
        "reward.num_workers=1",
        f"reward.custom_reward_function.path={reward_path or reward_fn_path()}",
        "reward.custom_reward_function.name=compute_score",
        "algorithm.adv_estimator=seal_grpo",
        "trainer.use_v1=false",
        "trainer.project_name=seal_dry_run",
        "trainer.experiment_name=dry",
        "trainer.device=cpu",
    ]
    if agent_loop_yaml:
        ov.append(f"actor_rollout_ref.rollout.agent.agent_loop_config_path={agent_loop_yaml}")
    ov += list(overrides or [])
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        cfg = compose(config_name="ppo_trainer", overrides=ov)
    with open_dict(cfg):
        cfg.seal = OmegaConf.create(seal if seal is not None else {})
    return cfg


def dataset_rows(task_ids: list[str], agent_name: str, split: str, call_format: str = "json",
                 env: Optional[str] = None) -> list[dict]:
    """Parquet rows for ``task_ids``, built by the environment's row builder (BFCL: ``seal-verl prepare-data``'s),
    with ``agent_name`` set as asked."""
    rows = environment(env).dataset_rows(list(task_ids), split, call_format)
    for row in rows:
        row["agent_name"] = agent_name
    return rows


def write_parquet(rows: list[dict], path: str) -> str:
    import pandas as pd

    pd.DataFrame(rows).to_parquet(path)
    return path


def load_batch(parquet: str, config, tokenizer, n: int, uid_prefix: str = ""):
    """Rows of ``parquet`` through verl's RLHFDataset + collate_fn into a DataProto repeated ``n`` times."""
    import numpy as np
    from verl import DataProto
    from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn

    import contextlib
    import io

    with contextlib.redirect_stdout(io.StringIO()):  # RLHFDataset prints its class and length
        ds = RLHFDataset(data_files=[parquet], tokenizer=tokenizer, config=config.data, processor=None)
    batch = DataProto.from_single_dict(collate_fn([ds[i] for i in range(len(ds))]))
    batch.non_tensor_batch["uid"] = np.array([f"{uid_prefix}{i}" for i in range(len(batch))], dtype=object)
    return batch.repeat(repeat_times=n, interleave=True)


class _RemoteMethod:
    def __init__(self, fn):
        self._fn = fn

    def remote(self, *args, **kwargs):
        return self._fn(*args, **kwargs)


class InProcessRewardWorker:
    """verl's real ``RewardLoopWorker`` in this process, shaped like its Ray handle (``.compute_score.remote``).

    Each call gets a pickled copy of the data, as a Ray call would. This matters: verl's ``NaiveRewardManager``
    updates the row's ``extra_info`` dict in place with the rollout's ``extra_fields``, and the ``rollout.n``
    copies of a row share one dict object; without the copy, concurrent rollouts of one prompt would grade
    each other's traces.
    """

    def __init__(self, config):
        from verl.experimental.reward_loop.reward_loop import RewardLoopWorker

        self.worker = RewardLoopWorker(config, None)
        self.compute_score = _RemoteMethod(self._compute_score)

    async def _compute_score(self, data):
        import pickle

        return await self.worker.compute_score(pickle.loads(pickle.dumps(data)))


def make_worker(config, llm, reward: bool = True):
    """verl's real ``AgentLoopWorker`` in this process, with ``llm`` as its server client. Call with the
    event loop the rollouts will run on set as current (verl's loops capture it)."""
    import verl  # noqa: F401 - loads the seal plugin (registers the agent loops)
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker

    from seal_verl.verl_glue import agent_loop  # noqa: F401 - registration also without the entry point

    import contextlib
    import io

    handles = [InProcessRewardWorker(config)] if reward else None
    with contextlib.redirect_stdout(io.StringIO()):  # verl prints the dataset class it picked
        return AgentLoopWorker(config, llm, None, handles)


def rollout_texts(gen, tokenizer, i: int) -> tuple[str, str, str]:
    """(prompt, model part, observation part) of row ``i`` of an agent-loop output, decoded with special tokens."""
    p = gen.batch["prompts"][i]
    n = p.shape[0]
    att = gen.batch["attention_mask"][i]
    r = gen.batch["responses"][i]
    valid = att[n:].bool()
    m = gen.batch["response_mask"][i].bool()
    return (tokenizer.decode(p[att[:n].bool()]), tokenizer.decode(r[valid & m]), tokenizer.decode(r[valid & ~m]))


def hint_flags(gen, tokenizer) -> list[bool]:
    """Per row: does any cue marker appear anywhere in the rendered tokens (prompt or response)?"""
    from env_wrappers.protocol import CUE_MARKER as marker

    out = []
    for i in range(len(gen)):
        prompt, model, obs = rollout_texts(gen, tokenizer, i)
        out.append(marker in prompt or marker in model or marker in obs)
    return out


# ============================================================================================================
# the dry run
# ============================================================================================================


@dataclass
class DryRunConfig:
    out: str = "runs/dry"
    steps: int = 6
    tasks_per_step: int = 4
    rollouts: int = 4
    val_tasks: int = 2
    call_format: str = "json"
    env: str = DEFAULT_ENV
    seed: int = 0
    model: Optional[str] = None
    prompt_length: int = 16384
    response_length: int = 8192
    max_tokens_per_turn: Optional[int] = None
    max_cue_tokens: Optional[int] = None
    progress: bool = True
    verbose: bool = True
    seal: dict = field(default_factory=lambda: {
        "switches": {"env_side": True, "reweighting": True, "closed_loop": True},
        "weighting": {"dynamic": True, "n_conf": 4},
        "interface": {"on_threshold": 0.15, "off_threshold": 0.05, "patience": 2, "ema_beta": 0.5},
    })


def _pick_tasks(ids: list[str], count: int, offset: int, env: Optional[str] = None) -> list[str]:
    """``count`` ids round-robin over categories, starting at ``offset`` (deterministic)."""
    environment_ = environment(env)
    category = {t: environment_.category(environment_.load_task(t)) for t in ids}
    present = list(dict.fromkeys(category.values()))
    CATEGORIES = [c for c in environment_.categories if c in present] + [
        c for c in present if c not in environment_.categories]
    by_cat = {c: [t for t in ids if category[t] == c] for c in CATEGORIES}
    out = []
    i = offset
    while len(out) < count:
        cat = CATEGORIES[i % len(CATEGORIES)]
        pool = by_cat[cat]
        out.append(pool[(i // len(CATEGORIES)) % len(pool)])
        i += 1
    return out


_SHORT_LABELS = (("invalid_tool_call", "inv"), ("argument_mismatch", "arg"), ("state_mismatch", "state"),
                 ("recovery_failure", "recov"), ("missing_tool_call", "miss"), ("response_mismatch", "resp"),
                 ("spurious_tool_call", "spur"), ("pass", "pass"))
_SHORT_KINDS = {"call_format": "fmt", "schema_constraints": "schema", "tool_affordance": "afford",
                "error_recovery": "recov", "ask_or_abstain": "ask"}


def _kinds(kinds: list[str]) -> str:
    return ",".join(_SHORT_KINDS.get(k, k) for k in kinds) or "-"


def header_line() -> str:
    labels = " ".join(f"{short:>5}" for _, short in _SHORT_LABELS)
    return (f"step  succ | label prevalence: {labels} | cues on (this step)      | next step                | "
            f"rho inv   arg  recov miss | w mean+-std    | cue tok/rollout")


def format_row(row: dict) -> str:
    """One printed line per step: label prevalence, active cue kinds, rho, weights, cue tokens."""
    prev = row["prevalence"]
    labels = " ".join(f"{prev.get(k, 0.0):5.2f}" for k, _ in _SHORT_LABELS)
    rho = row["rho"]
    rhos = " ".join(f"{rho[k]:4.2f}" for k in ("invalid_tool_call", "argument_mismatch", "recovery_failure",
                                                   "missing_tool_call"))
    return (f"{row['step']:>4}  {row['success_rate']:4.2f} |                   {labels} | "
            f"{_kinds(row['active_during']):<24} | {_kinds(row['active_next']):<24} | {rhos:<20} | "
            f"{row['w_mean']:5.3f}+-{row['w_std']:5.3f}  | {row['cue_tokens_mean']:7.1f}")


class DryRun:
    """The closed loop for several steps (see the module docstring). ``run()`` returns the metric rows."""

    def __init__(self, cfg: DryRunConfig):
        self.cfg = cfg

    def _log(self, msg: str) -> None:
        if self.cfg.verbose:
            print(msg, flush=True)

    def run(self) -> list[dict]:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        try:
            return self._run(loop)
        finally:
            from seal_verl.verl_glue.agent_loop import set_state_source

            set_state_source(None)
            loop.close()
            asyncio.set_event_loop(None)

    def _run(self, loop) -> list[dict]:
        import numpy as np
        from tqdm import tqdm

        cfg = self.cfg
        t0 = time.time()
        _quiet_libraries()
        os.makedirs(cfg.out, exist_ok=True)
        out = os.path.abspath(cfg.out)

        import verl  # noqa: F401 - the seal plugin
        from verl.trainer.ppo import ray_trainer

        from seal_verl.verl_glue.advantage import (
            WeightPlan, profile_from_extras, record_from_extras, rows_from_non_tensor_batch, weight_metrics,
            weight_plan,
        )
        from seal_verl.verl_glue.agent_loop import set_state_source
        from seal_verl.verl_glue.config import parse_seal_config
        from seal_verl.verl_glue.driver import SealDriver

        model = tiny_model(cfg.model or os.path.join(out, "model"))
        train_loop, eval_loop = loop_names(cfg.env)
        yaml_path = write_agent_loop_yaml(os.path.join(out, "agent_loops.yaml"), cfg.call_format, env=cfg.env,
                                          max_tokens_per_turn=cfg.max_tokens_per_turn,
                                          max_cue_tokens=cfg.max_cue_tokens)
        config = verl_config(model, agent_loop_yaml=yaml_path, rollouts=cfg.rollouts, prompt_length=cfg.prompt_length,
                             response_length=cfg.response_length, seal=cfg.seal, reward_path=reward_fn_path(cfg.env))
        seal_cfg = parse_seal_config(config.seal)
        driver = SealDriver(seal_cfg, actor=None)  # in-process: the agent loops read the state directly
        set_state_source(lambda step: driver.state)

        env = environment(cfg.env)
        split = {"train": env.task_ids("train"), "eval": env.task_ids("eval") if cfg.val_tasks > 0 else []}
        tasks = {t: env.load_task(t) for t in split["train"] + split["eval"]}
        book = PlanBook(cfg.call_format, cfg.seed, env=cfg.env)
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(model)
        llm = ScriptedLLM(tokenizer, tasks, default=lambda t: book.get(t, "pass"), env=cfg.env)
        worker = make_worker(config, llm)
        with open(os.path.join(out, "config.json"), "w") as f:
            json.dump({"dry_run": {k: v for k, v in asdict(cfg).items()}, "seal": seal_cfg.to_dict(),
                       "model": model}, f, indent=1)
        self._log(f"[dry-run] set-up {time.time() - t0:.1f} s (model {model})")

        rows: list[dict] = []
        adv_estimator = config.algorithm.adv_estimator
        metrics_path = os.path.join(out, "metrics.jsonl")
        open(metrics_path, "w").close()
        bar = tqdm(total=cfg.steps, desc="dry-run", unit="step", disable=not cfg.progress, file=sys.stderr)
        if cfg.verbose:
            tqdm.write(header_line(), file=sys.stdout)
        for step in range(cfg.steps):
            ts = time.time()
            task_ids = _pick_tasks(split["train"], cfg.tasks_per_step, step * cfg.tasks_per_step, cfg.env)
            rng = random.Random(f"{cfg.seed}:{step}")
            mix = mix_at(step, cfg.steps)
            llm.reset()
            llm.global_steps = step
            for tid in task_ids:
                llm.queue(tid, draw_plans(book, tasks[tid], cfg.rollouts, mix, rng))
            parquet = write_parquet(dataset_rows(task_ids, train_loop, "train", cfg.call_format, cfg.env),
                                    os.path.join(out, "batch.parquet"))
            batch = load_batch(parquet, config, tokenizer, cfg.rollouts, uid_prefix=f"s{step}-")
            state_before = driver.state
            gen = loop.run_until_complete(worker.generate_sequences(batch))

            # ---- the trainer's advantage path (legacy-trainer layout: extras in non_tensor_batch)
            n = len(gen)
            gen.batch["token_level_rewards"] = gen.batch["rm_scores"]
            gen.non_tensor_batch["uid"] = batch.non_tensor_batch["uid"]
            extras = rows_from_non_tensor_batch(gen.non_tensor_batch, n)
            profiles = [profile_from_extras(r, i) for i, r in enumerate(extras)]
            records = [record_from_extras(r, i) for i, r in enumerate(extras)]
            weights = driver.weights(profiles, step)
            plan = WeightPlan(uids=np.asarray(gen.non_tensor_batch["uid"], dtype=object), weights=weights,
                              apply_to=driver.cfg.weighting.apply_to)
            with weight_plan(plan):
                gen = ray_trainer.compute_advantage(gen, adv_estimator=adv_estimator,
                                                    norm_adv_by_std_in_grpo=True, config=config.algorithm)
            driver.add_records(records)
            seal_metrics = driver.end_step(step + 1)
            driver.state.save(os.path.join(out, f"state_step_{step}.json"))

            # ---- per-rollout records
            cue_tokens = [int(x) for x in gen.non_tensor_batch["seal_cue_tokens"]]
            hints = hint_flags(gen, tokenizer)
            mask = gen.batch["response_mask"]
            adv = gen.batch["advantages"]
            with open(os.path.join(out, f"traces_step_{step}.jsonl"), "w") as f:
                for i in range(n):
                    trace = json.loads(gen.non_tensor_batch["seal_trace"][i])
                    rec = llm.record_for(trace)
                    m = mask[i].bool()
                    f.write(json.dumps({
                        "step": step,
                        "uid": str(gen.non_tensor_batch["uid"][i]),
                        "task_id": trace["task_id"],
                        "agent_loop": str(gen.non_tensor_batch["seal_agent_loop"][i]),
                        "plan": None if rec is None else {k: rec["plan"].to_dict()[k] for k in ("target", "kind", "turns", "labels")},
                        "labels": records[i].labels,
                        "abstention": records[i].abstention,
                        "reward": records[i].reward,
                        "w": float(weights[i]),
                        "advantage": float(adv[i][m].mean()) if bool(m.any()) else 0.0,
                        "cue_tokens": cue_tokens[i],
                        "hint_in_text": hints[i],
                        "interface_active": trace["meta"].get("interface_active", []),
                        "trace": trace,
                    }) + "\n")
            hist = driver.state.history[-1]
            row = {
                "step": step,
                "n_rollouts": n,
                "tasks": task_ids,
                "mix": {k: round(v, 4) for k, v in mix.items()},
                "active_during": sorted(k for k, on in state_before.interface.active.items() if on),
                "active_next": hist["active"],
                "prevalence": hist["prevalence"],
                "prevalence_ema": hist["prevalence_ema"],
                "rho": hist["rho"],
                "success_rate": hist["success_rate"],
                "w_mean": float(weights.mean()),
                "w_std": float(weights.std(unbiased=False)),
                "w_min": float(weights.min()),
                "w_max": float(weights.max()),
                "cue_tokens_mean": float(sum(cue_tokens) / max(n, 1)),
                "cue_tokens_max": max(cue_tokens) if cue_tokens else 0,
                "seconds": round(time.time() - ts, 2),
                "metrics": {k: v for k, v in {**seal_metrics, **weight_metrics(weights)}.items()},
            }
            rows.append(row)
            with open(metrics_path, "a") as f:
                f.write(json.dumps(row) + "\n")
            bar.update(1)
            if cfg.verbose:
                tqdm.write(format_row(row), file=sys.stdout)
        bar.close()

        # ---- validation: the evaluation loop, interface removed
        if cfg.val_tasks > 0:
            val_ids = _pick_tasks(split["eval"], cfg.val_tasks, 0, cfg.env)
            llm.reset()
            for tid in val_ids:
                llm.queue(tid, [book.get(tasks[tid], "pass")])
            parquet = write_parquet(dataset_rows(val_ids, eval_loop, "eval", cfg.call_format, cfg.env),
                                    os.path.join(out, "val.parquet"))
            batch = load_batch(parquet, config, tokenizer, 1, uid_prefix="val-")
            gen = loop.run_until_complete(worker.generate_sequences(batch))
            hints = hint_flags(gen, tokenizer)
            with open(os.path.join(out, "val_traces.jsonl"), "w") as f:
                for i in range(len(gen)):
                    f.write(json.dumps({
                        "task_id": str(gen.non_tensor_batch["task_id"][i]),
                        "agent_loop": str(gen.non_tensor_batch["seal_agent_loop"][i]),
                        "score": float(gen.non_tensor_batch["score"][i]),
                        "cue_tokens": int(gen.non_tensor_batch["seal_cue_tokens"][i]),
                        "hint_in_text": hints[i],
                        "trace": json.loads(gen.non_tensor_batch["seal_trace"][i]),
                    }) + "\n")
            self._log(f"[dry-run] validation ({eval_loop} loop): {len(gen)} rollouts, cue tokens "
                      f"{sum(int(x) for x in gen.non_tensor_batch['seal_cue_tokens'])}, "
                      f"score {float(np.mean([float(s) for s in gen.non_tensor_batch['score']])):.2f}")
        self._log(f"[dry-run] {cfg.steps} steps in {time.time() - t0:.1f} s; run folder {out}")
        return rows


def _quiet_libraries() -> None:
    """Silence per-step chatter of the libraries (dataset progress bars, tokenizer length warnings)."""
    import logging

    try:
        import datasets

        datasets.disable_progress_bars()
        datasets.utils.logging.set_verbosity_error()
    except Exception:  # noqa: BLE001 - cosmetic only
        pass
    try:
        import transformers

        transformers.utils.logging.set_verbosity_error()
    except Exception:  # noqa: BLE001
        pass
    logging.getLogger("verl").setLevel(logging.WARNING)


def run_dry(cfg: DryRunConfig) -> list[dict]:
    return DryRun(cfg).run()
