"""The dry run itself: several closed-loop steps through verl's real code paths, written to a run folder."""

from __future__ import annotations

import asyncio
import os
import random
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Optional

import numpy as np

from seal_verl.core import extras as X
from seal_verl.verl_glue.probe import CueEffectProbe

from seal_verl.rollouts.environments import DEFAULT_ENV, environment, loop_names
from seal_verl.rollouts.plans import PlanBook, draw_plans, mix_at
from seal_verl.rollouts.scripted_llm import ScriptedLLM
from seal_verl.rollouts.setup import (dataset_rows, hint_flags, load_batch, make_worker, quiet_libraries, reward_fn_path,
                                      tiny_model, verl_config, write_agent_loop_yaml, write_parquet)

from .console import format_row, header_line


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
    #: consent to move an earlier run's files in ``out`` aside (into a dated sibling folder); without it such a
    #: folder is refused (``seal_verl.outputs``)
    force: bool = False
    #: a recipe preset (recipes/bfcl_v3/config/preset/<name>.yaml, e.g. "paper"): its seal.weighting and
    #: seal.interface are merged over ``seal``, its reward_kwargs under ``reward_kwargs``
    preset: Optional[str] = None
    #: options of the reward function (reward.custom_reward_function.reward_kwargs), e.g. strict_abstention
    reward_kwargs: dict = field(default_factory=dict)
    #: the scripted policy: "mix" draws each rollout's plan from the step's mix whatever the prompt says;
    #: "cue_reader" passes whenever its first prompt carries a cue and draws from the mix otherwise (a policy
    #: that cues help, for the cue-effect probe)
    policy: str = "mix"
    seal: dict = field(default_factory=lambda: {
        "switches": {"env_side": True, "reweighting": True, "closed_loop": True},
        "weighting": {"n_conf": 4},  # few rollouts per step: dynamic rho trusts its statistics sooner
        "interface": {"on_threshold": 0.15, "off_threshold": 0.05, "patience": 2, "ema_beta": 0.5},
        # the cue-effect probe, small: 2 tasks x 2 rollouts per condition every other step
        "cue_effect": {"every": 2, "tasks": 2, "samples": 2, "max_rollouts": 28},
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


@dataclass
class _Setup:
    """What one dry run sets up once and its steps share: verl's config, the tokenizer, the in-process agent-loop
    worker and its scripted LLM, the plans, the tasks, the event loop, the run folder, the training loop's name."""

    config: Any
    tokenizer: Any
    worker: Any
    llm: Any
    book: Any
    tasks: dict
    loop: Any
    out: str
    train_loop: str


class DryRun:
    """The closed loop for several steps (see the module docstring). ``run()`` returns the metric rows."""

    def __init__(self, cfg: DryRunConfig):
        if cfg.policy not in ("mix", "cue_reader"):
            raise ValueError(f"policy must be 'mix' or 'cue_reader', got {cfg.policy!r}")
        self.cfg = cfg

    def _probe_generate(self, k: int, mix: dict, prefix: str):
        """The dry run's adapter of the cue-effect probe (``probe.run_probe``): the probe's rows (uids
        ``<prefix><n>``, the numbering ``load_batch`` gives) through the same in-process agent-loop worker as the
        training rows, the scripted plans drawn from the step's mix."""
        from seal_verl.runs import folder as RF
        from seal_verl.verl_glue.probe import ProbeOutput, stamp

        cfg, run = self.cfg, self.setup

        def generate(requests: list) -> list:
            rng = random.Random(f"{cfg.seed}:probe:{k}")
            tasks = list(dict.fromkeys(r.task_id for r in requests))
            per_task = {t: sum(r.task_id == t for r in requests) * requests[0].samples for t in tasks}
            run.llm.reset()
            for tid in tasks:
                run.llm.queue(tid, draw_plans(run.book, run.tasks[tid], per_task[tid], mix, rng, task_id=tid))
            base = {r["extra_info"]["task_id"]: r for r in dataset_rows(tasks, run.train_loop, "train",
                                                                          cfg.call_format, cfg.env)}
            rows = [stamp(base[r.task_id], r) for r in requests]
            parquet = write_parquet([{c: v for c, v in r.items() if c != "uid"} for r in rows],
                                    os.path.join(run.out, RF.DRY_PROBE_BATCH))
            batch = load_batch(parquet, run.config, run.tokenizer, requests[0].samples, uid_prefix=prefix)
            batch.non_tensor_batch["global_steps"] = np.array([k] * len(batch), dtype=object)  # as verl passes it
            gen = run.loop.run_until_complete(run.worker.generate_sequences(batch))
            ntb = gen.non_tensor_batch
            return [ProbeOutput(uid=str(batch.non_tensor_batch["uid"][i]),
                                key=f"{batch.non_tensor_batch['uid'][i]}_{i}",
                                extras={key: ntb[key][i] for key in X.KEYS if key in ntb},
                                cue_tokens=ntb[X.CUE_TOKENS][i]) for i in range(len(gen))]

        return generate

    def _log(self, msg: str) -> None:
        if self.cfg.verbose:
            print(msg, flush=True)

    def run(self) -> list[dict]:
        """Claim the run folder (refused if it holds an earlier run's results without ``force``; locked while the
        dry run writes it), then run.

        Raises:
            seal_verl.outputs.OutputRefused: the folder cannot be used (one line).
        """
        from seal_verl import outputs
        from seal_verl.runs import folder as RF

        out = os.path.abspath(self.cfg.out)
        model = self.cfg.model
        own = {RF.DRY_AGENT_LOOPS, RF.DRY_TRAIN_BATCH, RF.DRY_VAL_BATCH, RF.DRY_PROBE_BATCH, RF.DRY_MODEL}
        given = [model] if model and not os.path.abspath(model).startswith(out + os.sep) else []
        claim = outputs.claim(out, "seal-verl dry-run", reusable=lambda name: name in own, force=self.cfg.force,
                              other_hint="--out <another folder>", inputs=given, option="--out")
        outputs.say(claim, "[dry-run]")
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        try:
            with claim:
                return self._run(loop)
        finally:
            loop.close()
            asyncio.set_event_loop(None)

    def _run(self, loop) -> list[dict]:
        from tqdm import tqdm

        from seal_verl.runs import folder as RF
        from seal_verl.verl_glue.config import parse_seal_config
        from seal_verl.verl_glue.driver import SealDriver
        from seal_verl.verl_glue.in_process import train_step
        from seal_verl.verl_glue import provenance
        from seal_verl.verl_glue.probe import sampling
        from seal_verl.verl_glue.step import StepWriter

        cfg = self.cfg
        t0 = time.time()
        quiet_libraries()
        os.makedirs(cfg.out, exist_ok=True)
        out = os.path.abspath(cfg.out)
        model = tiny_model(cfg.model or os.path.join(out, RF.DRY_MODEL))
        train_loop, eval_loop = loop_names(cfg.env)
        yaml_path = write_agent_loop_yaml(os.path.join(out, RF.DRY_AGENT_LOOPS), cfg.call_format, env=cfg.env,
                                          max_tokens_per_turn=cfg.max_tokens_per_turn,
                                          max_cue_tokens=cfg.max_cue_tokens)
        seal_section, reward_kwargs = effective_settings(cfg)
        config = verl_config(model, agent_loop_yaml=yaml_path, rollouts=cfg.rollouts, prompt_length=cfg.prompt_length,
                             response_length=cfg.response_length, seal=seal_section, reward_path=reward_fn_path(cfg.env),
                             reward_kwargs=reward_kwargs)
        seal_cfg = parse_seal_config(config.seal)
        from seal_verl.core.settings import paper_departures

        for line in paper_departures(seal_cfg, cfg.preset):
            self._log(f"[dry-run] {line}")
        driver = SealDriver(seal_cfg, actor=None)  # in-process: the agent loops read the state directly

        env = environment(cfg.env)
        split = {"train": env.task_ids("train"), "eval": env.task_ids("eval") if cfg.val_tasks > 0 else []}
        tasks = {t: env.load_task(t) for t in split["train"] + split["eval"]}
        book = PlanBook(cfg.call_format, cfg.seed, env=cfg.env)
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(model)
        llm = ScriptedLLM(tokenizer, tasks, default=lambda t: book.get(t, "pass"), env=cfg.env,
                          chooser=cue_reader(book) if cfg.policy == "cue_reader" else None)
        probe = CueEffectProbe(seal_cfg)
        # the stand-in for the state actor: the driver's state as published after its last step
        worker = make_worker(config, llm, state_source=lambda step: {"global_step": driver.global_step,
                                                                     "state": driver.state})
        self.setup = _Setup(config=config, tokenizer=tokenizer, worker=worker, llm=llm, book=book, tasks=tasks,
                            loop=loop, out=out, train_loop=train_loop)
        # The trainer's run-folder writer, so a dry run's folder reads exactly like a real run's. A fresh run: the
        # folder was claimed (run()), so it holds no earlier run's rows to append to.
        folder = RF.RunFolder(out)
        writer = StepWriter(folder)
        folder.write_config({"dry_run": {k: v for k, v in asdict(cfg).items()}, "seal": seal_cfg.to_dict(),
                             "reward_kwargs": reward_kwargs, "model": model, "preset": cfg.preset})
        provenance.write(out, config, trainer="seal-verl dry-run", data=provenance.split_identity(split),
                         extra_overrides=[f"{k}={v}" for k, v in asdict(cfg).items()],
                         recipe={"preset": cfg.preset, "variant": None, "env": cfg.env, "policy": cfg.policy})
        self._log(f"[dry-run] set-up {time.time() - t0:.1f} s (model {model})")

        rows: list[dict] = []
        bar = tqdm(total=cfg.steps, desc="dry-run", unit="step", disable=not cfg.progress, file=sys.stderr)
        if cfg.verbose:
            tqdm.write(header_line(), file=sys.stdout)
        for step in range(cfg.steps):
            ts = time.time()
            k = step + 1  # run files and rows are numbered by the global step, from 1, as in a training run
            mix = mix_at(step, cfg.steps)
            probed = probe.measure(k, driver, split["train"], self._probe_generate(k, mix, f"p{k}-"), seed=cfg.seed,
                                   sampling=sampling(probe.cfg, config.actor_rollout_ref.rollout), uid_prefix=f"p{k}-")
            if probed is not None:
                folder.write_probe(k, probed.rows)
            task_ids = _pick_tasks(split["train"], cfg.tasks_per_step, step * cfg.tasks_per_step, cfg.env)
            rng = random.Random(f"{cfg.seed}:{step}")
            llm.reset()
            llm.global_steps = step
            for tid in task_ids:
                llm.queue(tid, draw_plans(book, tasks[tid], cfg.rollouts, mix, rng, task_id=tid))
            parquet = write_parquet(dataset_rows(task_ids, train_loop, "train", cfg.call_format, cfg.env),
                                    os.path.join(out, RF.DRY_TRAIN_BATCH))
            batch = load_batch(parquet, config, tokenizer, cfg.rollouts, uid_prefix=f"s{step}-")
            gen = loop.run_until_complete(worker.generate_sequences(batch))

            # ---- the trainer's step (legacy-trainer layout: extras in non_tensor_batch), then the run folder
            result = train_step(driver, gen, batch.non_tensor_batch["uid"], config, tokenizer, step)
            folder.write_state(k, driver.state)
            writer.write_traces(result.record, more=lambda r: {"plan": self._plan_of(r)})
            row = writer.write_metrics(result.record, seconds=round(time.time() - ts, 2),
                                       metrics={**result.metrics, **({} if probed is None else probed.metrics)},
                                       more={"tasks": task_ids, "mix": {k: round(v, 4) for k, v in mix.items()},
                                             "cue_effect": probe.take()})
            rows.append(row)
            bar.update(1)
            if cfg.verbose:
                tqdm.write(format_row(row), file=sys.stdout)
        bar.close()
        if cfg.val_tasks > 0:
            self._validate(split["eval"], eval_loop, folder)
        self._log(f"[dry-run] {cfg.steps} steps in {time.time() - t0:.1f} s; run folder {out}")
        return rows

    def _plan_of(self, rollout) -> Optional[dict]:
        """The scripted plan a training rollout played (its target, kind, turns and labels), from its trace."""
        rec = self.setup.llm.record_for(rollout.trace)
        return None if rec is None else {f: rec["plan"].to_dict()[f] for f in ("target", "kind", "turns", "labels")}

    def _validate(self, eval_ids: list[str], eval_loop: str, folder) -> None:
        """Validation after the last step: the evaluation loop (interface removed) on held-out tasks, numbered as
        verl numbers the validation of a training run."""
        from seal_verl.runs import folder as RF
        from seal_verl.runs.rows import val_row

        cfg, run = self.cfg, self.setup
        val_ids = _pick_tasks(eval_ids, cfg.val_tasks, 0, cfg.env)
        run.llm.reset()
        for tid in val_ids:
            run.llm.queue(tid, [run.book.get(run.tasks[tid], "pass", tid)])
        parquet = write_parquet(dataset_rows(val_ids, eval_loop, "eval", cfg.call_format, cfg.env),
                                os.path.join(run.out, RF.DRY_VAL_BATCH))
        batch = load_batch(parquet, run.config, run.tokenizer, 1, uid_prefix="val-")
        gen = run.loop.run_until_complete(run.worker.generate_sequences(batch))
        hints = hint_flags(gen, run.tokenizer)
        ntb = gen.non_tensor_batch
        folder.append_val([val_row(
            global_step=cfg.steps, key=str(i), score=float(ntb[X.SCORE][i]), hint_in_text=hints[i],
            reward_extras={k: ntb[k][i] for k in X.KEYS if k in ntb},
            extra_fields={k: ntb[k][i] for k in X.LOOP_FIELDS if k in ntb})
            for i in range(len(gen))])
        self._log(f"[dry-run] validation ({eval_loop} loop): {len(gen)} rollouts, cue tokens "
                  f"{sum(int(x) for x in ntb[X.CUE_TOKENS])}, "
                  f"score {float(np.mean([float(s) for s in ntb[X.SCORE]])):.2f}")


def cue_reader(book: PlanBook):
    """The ``cue_reader`` policy's choice for a new request: the passing plan when the first prompt carries a
    cue, else nothing (the request takes its queued plan)."""
    from seal_verl.core.observation import CUE_MARKER

    def choose(task, prompt_text: str):
        return book.get(task, "pass") if CUE_MARKER in prompt_text else None

    return choose


def run_dry(cfg: DryRunConfig) -> list[dict]:
    return DryRun(cfg).run()
