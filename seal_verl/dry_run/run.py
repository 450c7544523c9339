"""The dry run itself: several closed-loop steps through verl's real code paths, written to a run folder."""

from __future__ import annotations

import asyncio
import json
import os
import random
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Optional

from .console import format_row, header_line
from .environments import DEFAULT_ENV, environment, loop_names
from .plans import PlanBook, draw_plans, mix_at
from .scripted_llm import ScriptedLLM
from .verl_setup import (dataset_rows, hint_flags, load_batch, make_worker, reward_fn_path, tiny_model, verl_config,
                         write_agent_loop_yaml, write_parquet)


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
    #: a recipe preset (recipes/bfcl_v3/config/preset/<name>.yaml, e.g. "paper"): its seal.weighting and
    #: seal.interface are merged over ``seal``, its reward_kwargs under ``reward_kwargs``
    preset: Optional[str] = None
    #: options of the reward function (reward.custom_reward_function.reward_kwargs), e.g. strict_abstention
    reward_kwargs: dict = field(default_factory=dict)
    seal: dict = field(default_factory=lambda: {
        "switches": {"env_side": True, "reweighting": True, "closed_loop": True},
        "weighting": {"n_conf": 4},  # few rollouts per step: dynamic rho trusts its statistics sooner
        "interface": {"on_threshold": 0.15, "off_threshold": 0.05, "patience": 2, "ema_beta": 0.5},
    })


def effective_settings(cfg: DryRunConfig) -> tuple[dict, dict]:
    """The ``seal`` section and the reward options the run uses: ``cfg.seal`` / ``cfg.reward_kwargs`` with the
    preset (if any) merged over the first and under the second (an explicit reward option wins)."""
    if not cfg.preset:
        return cfg.seal, dict(cfg.reward_kwargs)
    from .presets import load_preset, merge

    preset = load_preset(cfg.preset)
    return merge(cfg.seal, preset["seal"]), {**preset["reward_kwargs"], **cfg.reward_kwargs}


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
            WeightPlan, excluded_rows, profile_from_extras, record_from_extras, rows_from_non_tensor_batch,
            token_range, weight_metrics, weight_plan,
        )
        from seal_verl.profile import profile_keys
        from seal_verl.verl_glue.agent_loop import set_state_source
        from seal_verl.verl_glue.config import parse_seal_config
        from seal_verl.verl_glue.driver import RUN_METRICS_FILE, RUN_VAL_FILE, RunFolder, SealDriver

        model = tiny_model(cfg.model or os.path.join(out, "model"))
        train_loop, eval_loop = loop_names(cfg.env)
        yaml_path = write_agent_loop_yaml(os.path.join(out, "agent_loops.yaml"), cfg.call_format, env=cfg.env,
                                          max_tokens_per_turn=cfg.max_tokens_per_turn,
                                          max_cue_tokens=cfg.max_cue_tokens)
        seal_section, reward_kwargs = effective_settings(cfg)
        config = verl_config(model, agent_loop_yaml=yaml_path, rollouts=cfg.rollouts, prompt_length=cfg.prompt_length,
                             response_length=cfg.response_length, seal=seal_section, reward_path=reward_fn_path(cfg.env),
                             reward_kwargs=reward_kwargs)
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
        # The trainer's run-folder writer, so a dry run's folder reads exactly like a real run's.
        folder = RunFolder(out)
        for name in (RUN_METRICS_FILE, RUN_VAL_FILE):  # a fresh run: the appended files start empty
            if os.path.exists(folder.file(name)):
                os.remove(folder.file(name))
        folder.write_config({"dry_run": {k: v for k, v in asdict(cfg).items()}, "seal": seal_cfg.to_dict(),
                             "reward_kwargs": reward_kwargs, "model": model})
        self._log(f"[dry-run] set-up {time.time() - t0:.1f} s (model {model})")

        rows: list[dict] = []
        adv_estimator = config.algorithm.adv_estimator
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
                llm.queue(tid, draw_plans(book, tasks[tid], cfg.rollouts, mix, rng, task_id=tid))
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
            excluded = excluded_rows(extras)
            plan = WeightPlan(uids=np.asarray(gen.non_tensor_batch["uid"], dtype=object), weights=weights,
                              apply_to=driver.cfg.weighting.apply_to, exclude=excluded)
            with weight_plan(plan):
                gen = ray_trainer.compute_advantage(gen, adv_estimator=adv_estimator,
                                                    norm_adv_by_std_in_grpo=True, config=config.algorithm)
            driver.add_records(records)
            seal_metrics = driver.end_step(step + 1)
            k = step + 1  # run files and rows are numbered by the global step, from 1, as in a training run
            folder.write_state(k, driver.state)

            # ---- per-rollout records
            cue_tokens = [int(x) for x in gen.non_tensor_batch["seal_cue_tokens"]]
            hints = hint_flags(gen, tokenizer)
            mask = gen.batch["response_mask"]
            adv = gen.batch["advantages"]
            ranges = token_range(adv, mask)
            trace_rows = []
            for i in range(n):
                trace = json.loads(gen.non_tensor_batch["seal_trace"][i])
                rec = llm.record_for(trace)
                m = mask[i].bool()
                trace_rows.append({
                    "step": k,
                    "global_step": k,
                    "uid": str(gen.non_tensor_batch["uid"][i]),
                    "task_id": trace["task_id"],
                    "agent_loop": str(gen.non_tensor_batch["seal_agent_loop"][i]),
                    "plan": None if rec is None else {k: rec["plan"].to_dict()[k] for k in ("target", "kind", "turns", "labels")},
                    "labels": records[i].labels,
                    "abstention": records[i].abstention,
                    "profile_keys": profile_keys(records[i].labels, records[i].abstention),
                    "reward": records[i].reward,
                    "w": float(weights[i]),
                    "advantage": float(adv[i][m].mean()) if bool(m.any()) else 0.0,
                    "grpo_advantage": plan.grpo[i],
                    "advantage_range": None if ranges[i] is None else list(ranges[i]),
                    "excluded": bool(excluded[i]),
                    "cue_tokens": cue_tokens[i],
                    "hint_in_text": hints[i],
                    "interface_active": trace["meta"].get("interface_active", []),
                    "trace": trace,
                })
            folder.write_traces(k, trace_rows)
            hist = driver.state.history[-1]
            row = {
                "step": k,
                "global_step": k,
                "n_rollouts": n,
                "tasks": task_ids,
                "mix": {k: round(v, 4) for k, v in mix.items()},
                "active_during": sorted(k for k, on in state_before.interface.active.items() if on),
                "active_next": hist["active"],
                "prevalence": hist["prevalence"],
                "prevalence_ema": hist["prevalence_ema"],
                "rate": hist["rate"],
                "rate_ema": hist["rate_ema"],
                "rho": hist["rho"],
                "rho_used": dict(state_before.rho),
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
            folder.append_metrics(row)
            bar.update(1)
            if cfg.verbose:
                tqdm.write(format_row(row), file=sys.stdout)
        bar.close()

        # ---- validation: the evaluation loop, interface removed
        if cfg.val_tasks > 0:
            val_ids = _pick_tasks(split["eval"], cfg.val_tasks, 0, cfg.env)
            llm.reset()
            for tid in val_ids:
                llm.queue(tid, [book.get(tasks[tid], "pass", tid)])
            parquet = write_parquet(dataset_rows(val_ids, eval_loop, "eval", cfg.call_format, cfg.env),
                                    os.path.join(out, "val.parquet"))
            batch = load_batch(parquet, config, tokenizer, 1, uid_prefix="val-")
            gen = loop.run_until_complete(worker.generate_sequences(batch))
            hints = hint_flags(gen, tokenizer)
            folder.append_val([{
                        "task_id": str(gen.non_tensor_batch["task_id"][i]),
                        "agent_loop": str(gen.non_tensor_batch["seal_agent_loop"][i]),
                        "score": float(gen.non_tensor_batch["score"][i]),
                        "cue_tokens": int(gen.non_tensor_batch["seal_cue_tokens"][i]),
                        "hint_in_text": hints[i],
                        "trace": json.loads(gen.non_tensor_batch["seal_trace"][i]),
                    } for i in range(len(gen))])
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
