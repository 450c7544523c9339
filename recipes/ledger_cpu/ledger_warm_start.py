"""Warm start of the ledger learning benchmark: the tiny local Qwen2 fine-tuned on ground-truth ledger
trajectories until it is partly right, with and without SEAL's cue text in its observations.

    python recipes/ledger_cpu/ledger_warm_start.py OUT_DIR --base MODEL_DIR [--epochs N] [--lr X]
                                                   [--target P] [--samples K] [--force]

The rows are rendered by verl's real ``AgentLoopWorker`` running the ``seal_env`` loop on every training task,
with a scripted client that answers with the ground truth (as ``recipes/bfcl_v3/cpu/warm_start.py`` does for
BFCL, whose fine-tuning, sampling and caching code this reuses). Unlike the BFCL warm start, each task is
rendered twice: under the initial interface (no cue) and with every cue kind on and ``proactive_cues`` true, so
the start-of-task cue blocks sit in the first user message. The model thus learns its calls both with and
without cue text and can still act when SEAL switches cues on during RL; without such rows a 0.4M-parameter
model is knocked off its calls by text it has never seen. Then the same agent loop samples ``--samples``
rollouts per training task at the recipe's temperature and greedy rollouts of the held-out tasks; both pass
rates go to ``warm_start.json``. Cached by a fingerprint of every input; nothing is downloaded.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from typing import Optional

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "recipes", "bfcl_v3", "cpu"))
import warm_start as base_ws  # noqa: E402  (the BFCL warm start: fine_tune, HFSampler, caching helpers)

ENV = "ledger"
AGENT_LOOPS = os.path.join(HERE, "agent_loops", "json.yaml")
TRAIN_LOOP, EVAL_LOOP = "seal_env", "env"
PROMPT_LENGTH = 1536
RESPONSE_LENGTH = 768
TEMPERATURE = 1.0
DEFAULTS = {"epochs": 40, "lr": 5e-3, "samples": 4, "seed": 0, "target": 0.35}


def _setup(model: str, task_ids: list[str], llm_factory, rollouts: int, out: str, loop: str,
           overrides: Optional[list[str]] = None):
    """verl's AgentLoopWorker in this process over ``task_ids`` (rows of ``loop``) with the client of the factory."""
    from transformers import AutoTokenizer

    from seal_verl import dry_run as dr

    config = dr.verl_config(model, agent_loop_yaml=AGENT_LOOPS, rollouts=rollouts, prompt_length=PROMPT_LENGTH,
                            response_length=RESPONSE_LENGTH, reward_path=dr.reward_fn_path(ENV), seal={},
                            overrides=[f"actor_rollout_ref.rollout.temperature={TEMPERATURE}",
                                       f"actor_rollout_ref.rollout.agent.default_agent_loop={loop}"]
                            + list(overrides or []))
    tokenizer = AutoTokenizer.from_pretrained(model)
    llm = llm_factory(tokenizer)
    worker = dr.make_worker(config, llm)
    parquet = dr.write_parquet(dr.dataset_rows(task_ids, loop, "train", "json", env=ENV),
                               os.path.join(out, f"warm_start_{loop}.parquet"))
    batch = dr.load_batch(parquet, config, tokenizer, rollouts, uid_prefix="warm-")
    return worker, batch, llm


def render_scripted(model: str, task_ids: list[str], out: str, plan, expected: Optional[dict] = None
                    ) -> tuple[list[dict], list[str]]:
    """Rows of the scripted rollouts ``plan(task)`` -> Plan of every task, played through the training loop under
    no cue and under every cue kind on (proactive cues); kept when the rollout passes or, with ``expected``
    (``{task_id: labels}``), when it carries exactly those labels. Returns ``(rows, rejected)``."""
    from seal_verl import dry_run as dr
    from seal_verl.interface import CUE_KINDS

    env = dr.environment(ENV)
    tasks = {t: env.load_task(t) for t in task_ids}

    def factory(tok):
        return dr.ScriptedLLM(tok, tasks, default=plan, env=ENV)

    return base_ws.render_under_cue_states(lambda: _setup(model, task_ids, factory, 1, out, TRAIN_LOOP), task_ids,
                                           [(), tuple(CUE_KINDS)], expected)


def render_rows(model: str, task_ids: list[str], out: str) -> list[dict]:
    """Ground-truth rows of every task under no cue and under every cue kind on (proactive cues)."""
    from seal_verl import dry_run as dr

    book = dr.PlanBook("json", 0, env=ENV)
    rows, failed = render_scripted(model, task_ids, out, lambda task: book.get(task, "pass"))
    if failed:
        raise base_ws.WarmStartError(f"ground-truth ledger rollouts that do not pass: {'; '.join(failed[:4])}")
    return rows


def pass_rates(model_dir: str, task_ids: list[str], samples: int, seed: int, out: str, greedy: bool = False) -> dict:
    """Per task: rollouts sampled from ``model_dir`` (training loop at temperature 1, or the evaluation loop
    greedily), graded by the real reward function -> ``{"pass_rate", "scores", "labels"}``."""
    loop = EVAL_LOOP if greedy else TRAIN_LOOP
    over = ["actor_rollout_ref.rollout.temperature=0"] if greedy else []

    def setup(factory):
        worker, batch, _ = _setup(model_dir, task_ids, factory, samples, out, loop, over)
        return worker, batch

    return base_ws.sampled_pass_rates(model_dir, task_ids, seed, setup)


def _mean(rates: dict) -> Optional[float]:
    return sum(r["pass_rate"] for r in rates.values()) / len(rates) if rates else None


def warm_start(out: str, base: str, epochs: int = DEFAULTS["epochs"], lr: float = DEFAULTS["lr"],
               samples: int = DEFAULTS["samples"], seed: int = DEFAULTS["seed"], target: float = DEFAULTS["target"],
               force: bool = False, more_rows=None, more_params: Optional[dict] = None) -> dict:
    """Build (or reuse) the warm-started ledger model in ``out``; returns ``warm_start.json``'s contents.

    ``more_rows(base, out)`` -> rows trained beside the ground truth (the mixed stage's labelled failures, each
    with a ``failure`` key); ``more_params``: the settings that made them. Both are part of the cache key."""
    from seal_verl import dry_run as dr

    env = dr.environment(ENV)
    train_ids, eval_ids = env.task_ids("train"), env.task_ids("eval")
    t0 = time.time()
    os.makedirs(out, exist_ok=True)
    rows = render_rows(base, train_ids, out)
    # ground truth first: fine_tune's stopping rule probes each task's first row (its ground truth, no cue)
    rows += more_rows(base, out) if more_rows else []
    params = {"epochs": int(epochs), "lr": float(lr), "samples": int(samples), "seed": int(seed),
              "target": float(target), "temperature": TEMPERATURE, "code": base_ws._file_digest(__file__),
              **(more_params or {})}
    fp = base_ws.fingerprint(base, rows, params)
    info = base_ws.read_info(out)
    if not force and info and info.get("fingerprint") == fp and os.path.isfile(os.path.join(out, "config.json")):
        print(f"[warm-start] cached: {out} (fingerprint {fp[:12]}); sampled pass rate on the training tasks "
              f"{info.get('mean_pass_rate')}, greedy held-out accuracy {info.get('heldout_greedy')}", flush=True)
        return dict(info, out=os.path.abspath(out))
    failing = Counter(r["failure"] for r in rows if r.get("failure"))
    kinds = f"; failing: {', '.join(f'{k} {n}' for k, n in failing.items())}" if failing else ""
    print(f"[warm-start] {len(rows)} rows ({len(train_ids)} tasks x no cue / every cue on{kinds}): "
          f"{sum(r['trained_tokens'] for r in rows)} trained tokens, "
          f"{min(len(r['input_ids']) for r in rows)}-{max(len(r['input_ids']) for r in rows)} tokens per row", flush=True)
    t1 = time.time()
    for name in os.listdir(out):
        if name in (base_ws.INFO_FILE, "config.json", "generation_config.json", "model.safetensors"):
            os.remove(os.path.join(out, name))
    log = base_ws.fine_tune(base, rows, out, epochs, lr, seed, target)
    t2 = time.time()
    rates = pass_rates(out, train_ids, samples, seed, out) if samples else {}
    held = pass_rates(out, eval_ids, 1, seed, out, greedy=True) if samples else {}
    t3 = time.time()
    info = {
        "fingerprint": fp, "out": os.path.abspath(out), "base": os.path.abspath(base), "env": ENV,
        "tasks": train_ids, "params": params, "epochs_run": log[-1]["epoch"], "log": log,
        "rows": [{k: r.get(k) for k in ("task_id", "interface", "failure", "prompt_tokens", "response_tokens",
                                        "trained_tokens")} for r in rows],
        "pass_rates": rates, "mean_pass_rate": _mean(rates),
        "heldout": held, "heldout_greedy": _mean(held),
        "seconds": {"render": round(t1 - t0, 1), "fine_tune": round(t2 - t1, 1), "pass_rate": round(t3 - t2, 1)},
    }
    with open(os.path.join(out, base_ws.INFO_FILE) + ".tmp", "w", encoding="utf-8") as f:
        json.dump(info, f, indent=1)
    os.replace(os.path.join(out, base_ws.INFO_FILE) + ".tmp", os.path.join(out, base_ws.INFO_FILE))
    print(f"[warm-start] sampled pass rate on the training tasks {info['mean_pass_rate']}, greedy held-out "
          f"accuracy {info['heldout_greedy']}; done in {t3 - t0:.0f} s (fine-tune {t2 - t1:.0f} s, pass rates "
          f"{t3 - t2:.0f} s): {out}", flush=True)
    return info


def cli(argv: Optional[list[str]], doc: str, build, defaults: dict, base_help: str, target: bool = True) -> int:
    """The command line of a warm-start stage: ``OUT --base MODEL`` and its fine-tuning options (``--target``
    only where the stage has a stopping target); ``build(args)`` builds the stage. Exits 2 with one line on error."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--base", required=True, help=base_help)
    p.add_argument("--epochs", type=int, default=defaults["epochs"])
    p.add_argument("--lr", type=float, default=defaults["lr"])
    if target:
        p.add_argument("--target", type=float, default=defaults["target"],
                       help="stop once the mean exp(-NLL) of the ground-truth rows reaches this (default: %(default)s)")
    p.add_argument("--samples", type=int, default=defaults["samples"])
    p.add_argument("--seed", type=int, default=defaults["seed"])
    p.add_argument("--force", action="store_true")
    args = p.parse_args(argv)
    if not os.path.isfile(os.path.join(args.base, "config.json")):
        p.error(f"--base {args.base}: not a model folder (no config.json)")
    from seal_verl.dry_run import quiet_libraries

    quiet_libraries()
    try:
        build(args)
    except (base_ws.WarmStartError, ValueError, FileNotFoundError) as e:
        print(f"warm-start: error: {e}", file=sys.stderr)
        return 2
    return 0


def main(argv: Optional[list[str]] = None) -> int:
    return cli(argv, __doc__, lambda a: warm_start(a.out, a.base, a.epochs, a.lr, a.samples, a.seed, a.target, a.force),
               DEFAULTS, "the tiny random model to start from")


if __name__ == "__main__":
    sys.exit(main())
