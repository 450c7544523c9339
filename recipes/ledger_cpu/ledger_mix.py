"""The last stage of the ledger warm start: a policy that mixes right and wrong behaviours, for RL to sharpen.

    python recipes/ledger_cpu/ledger_mix.py OUT_DIR --base MODEL_DIR [--epochs N] [--lr X] [--force]

After the four supervised stages (ledger_warm_start.py) the tiny model calls the right tool on most turns and
errs mostly in the arguments (which account, which amount). Copying arguments is what a 0.4M-parameter model
learns slowest: from that model GRPO did not raise the reward within 20 steps at any learning rate tried
(docs/benchmarks.md). This stage fine-tunes it further on the same ground-truth rows plus, for every training
task and cue state, one scripted *failing* trajectory of the same task: no call where one is due
(``missing_tool_call``), the opposite state change (``state_mismatch``), or a malformed call
(``invalid_tool_call``), the kind cycling over the tasks. The model thus ends with a behaviour mix, right on
some samples and wrong in labelled ways on others, as a partly trained agent is; which choice is right is
learnable from the reward within a few steps. Failing rows are rendered under the same cue states as the right
ones (none, every cue kind on), so cue text carries no hint of which to choose: SEAL's environment side starts
level with vanilla GRPO. Each failing trajectory is a plan of the dry run (``seal_verl.dry_run.PlanBook``) whose
labels the environment's verifier and Psi confirmed; the agent loop must reproduce them, or the row is dropped.
Cached like the other stages (fingerprint of the rows, the base model, the settings and this file).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Optional

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import ledger_warm_start as lws  # noqa: E402  (the ledger agent loop set-up, ground-truth rows, pass rates)

base_ws = lws.base_ws

#: the failure kinds mixed in, cycled over the training tasks (a task that cannot show one takes the next)
MIX_KINDS = ("missing_tool_call", "state_mismatch", "invalid_tool_call")
DEFAULTS = {"epochs": 10, "lr": 3e-3, "samples": 1, "seed": 0}


def failure_plans(task_ids: list[str], kinds: tuple = MIX_KINDS) -> dict:
    """``{task_id: Plan}``: per task a verified failing plan, trying the kinds from ``kinds[i % len(kinds)]`` on."""
    from seal_verl import dry_run as dr

    env = dr.environment(lws.ENV)
    book = dr.PlanBook("json", 0, env=lws.ENV)
    plans = {}
    for i, tid in enumerate(task_ids):
        task = env.load_task(tid)
        for j in range(len(kinds)):
            plan = book.get(task, kinds[(i + j) % len(kinds)], tid)
            if plan is not None:
                plans[tid] = plan
                break
    return plans


def _row(gen, i: int, subset: tuple) -> dict:
    """Row ``i`` of an agent-loop batch: prompt + response tokens, labels on the generated tokens only."""
    n = gen.batch["prompts"].shape[1]
    att = gen.batch["attention_mask"][i].bool()
    prompt = gen.batch["prompts"][i][att[:n]].tolist()
    valid = att[n:]
    response = gen.batch["responses"][i][valid].tolist()
    mask = gen.batch["response_mask"][i][valid].tolist()
    return {"task_id": str(gen.non_tensor_batch["task_id"][i]), "interface": ",".join(subset) or "none",
            "input_ids": prompt + response, "labels": [-100] * len(prompt) + [t if m else -100
                                                                            for t, m in zip(response, mask)],
            "prompt_tokens": len(prompt), "response_tokens": len(response), "trained_tokens": int(sum(mask))}


def render_failure_rows(model: str, plans: dict, out: str) -> tuple[list[dict], list[str]]:
    """The failing plans played through verl's real agent loop under no cue and under every cue kind on.
    Returns ``(rows, dropped)``: a row is kept only when the loop's labels are the plan's."""
    from seal_verl import dry_run as dr
    from seal_verl.interface import CUE_KINDS
    from seal_verl.verl_glue.agent_loop import set_state_source

    task_ids = list(plans)
    env = dr.environment(lws.ENV)
    tasks = {t: env.load_task(t) for t in task_ids}

    def factory(tok):
        return dr.ScriptedLLM(tok, tasks, default=lambda t: plans[t.id], env=lws.ENV)

    subsets = [(), tuple(CUE_KINDS)]

    async def go():
        worker, batch, llm = lws._setup(model, task_ids, factory, 1, out, lws.TRAIN_LOOP)
        gens = []
        try:
            for subset in subsets:
                set_state_source(base_ws.cue_state(subset))
                llm.reset()
                gens.append((subset, await worker.generate_sequences(batch)))
        finally:
            set_state_source(None)
        return gens

    rows, dropped = [], []
    for subset, gen in base_ws._run_loop(go):
        for i in range(len(gen)):
            tid = str(gen.non_tensor_batch["task_id"][i])
            labels = json.loads(str(gen.non_tensor_batch["seal_labels"][i]))
            if labels != plans[tid].labels:
                dropped.append(f"{tid} ({plans[tid].target}: labels {labels}, planned {plans[tid].labels})")
                continue
            rows.append(dict(_row(gen, i, subset), failure=plans[tid].target))
    rows.sort(key=lambda r: (task_ids.index(r["task_id"]), len(r["interface"]), r["interface"]))
    return rows, dropped


def mixed_stage(out: str, base: str, epochs: int = DEFAULTS["epochs"], lr: float = DEFAULTS["lr"],
                samples: int = DEFAULTS["samples"], seed: int = DEFAULTS["seed"], force: bool = False) -> dict:
    """Build (or reuse) the mixed model in ``out`` from ``base``; returns its ``warm_start.json`` contents."""
    from seal_verl import dry_run as dr

    env = dr.environment(lws.ENV)
    train_ids, eval_ids = env.task_ids("train"), env.task_ids("eval")
    t0 = time.time()
    os.makedirs(out, exist_ok=True)
    right = lws.render_rows(base, train_ids, out)
    plans = failure_plans(train_ids)
    wrong, dropped = render_failure_rows(base, plans, out)
    if len({r["task_id"] for r in wrong}) < len(train_ids) // 2:
        raise base_ws.WarmStartError(f"failing rows for only {len({r['task_id'] for r in wrong})} of "
                                     f"{len(train_ids)} tasks: {'; '.join(dropped[:4])}")
    # right rows first: fine_tune's stopping rule probes each task's first row (its ground truth, no cue)
    rows = right + wrong
    params = {"epochs": int(epochs), "lr": float(lr), "samples": int(samples), "seed": int(seed),
              "kinds": list(MIX_KINDS), "temperature": lws.TEMPERATURE, "code": base_ws._file_digest(__file__)}
    fp = base_ws.fingerprint(base, rows, params)
    info = base_ws.read_info(out)
    if not force and info and info.get("fingerprint") == fp and os.path.isfile(os.path.join(out, "config.json")):
        print(f"[warm-start] cached: {out} (fingerprint {fp[:12]}); sampled pass rate on the training tasks "
              f"{info.get('mean_pass_rate')}, greedy held-out accuracy {info.get('heldout_greedy')}", flush=True)
        return dict(info, out=os.path.abspath(out))
    kinds = {k: sum(r.get("failure") == k for r in wrong) for k in MIX_KINDS}
    print(f"[warm-start] mixed stage: {len(right)} right rows and {len(wrong)} failing rows "
          f"({', '.join(f'{k} {n}' for k, n in kinds.items())}; {len(dropped)} dropped)", flush=True)
    t1 = time.time()
    for name in os.listdir(out):
        if name in (base_ws.INFO_FILE, "config.json", "generation_config.json", "model.safetensors"):
            os.remove(os.path.join(out, name))
    # target 1.0: no task leaves the mix early (its ground truth can no longer reach probability 1)
    log = base_ws.fine_tune(base, rows, out, epochs, lr, seed, 1.0)
    t2 = time.time()
    rates = lws.pass_rates(out, train_ids, samples, seed, out) if samples else {}
    held = lws.pass_rates(out, eval_ids, 1, seed, out, greedy=True) if samples else {}
    t3 = time.time()
    info = {
        "fingerprint": fp, "out": os.path.abspath(out), "base": os.path.abspath(base), "env": lws.ENV,
        "tasks": train_ids, "params": params, "epochs_run": log[-1]["epoch"], "log": log,
        "rows": [{k: r.get(k) for k in ("task_id", "interface", "failure", "prompt_tokens", "trained_tokens")}
                 for r in rows], "dropped": dropped,
        "pass_rates": rates, "mean_pass_rate": lws._mean(rates),
        "heldout": held, "heldout_greedy": lws._mean(held),
        "seconds": {"render": round(t1 - t0, 1), "fine_tune": round(t2 - t1, 1), "pass_rate": round(t3 - t2, 1)},
    }
    from seal_verl.atomic import atomic_write_text

    atomic_write_text(os.path.join(out, base_ws.INFO_FILE), json.dumps(info, indent=1))
    print(f"[warm-start] sampled pass rate on the training tasks {info['mean_pass_rate']}, greedy held-out "
          f"accuracy {info['heldout_greedy']}; done in {t3 - t0:.0f} s: {out}", flush=True)
    return info


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--base", required=True, help="the four-stage ledger warm start to start from")
    p.add_argument("--epochs", type=int, default=DEFAULTS["epochs"])
    p.add_argument("--lr", type=float, default=DEFAULTS["lr"])
    p.add_argument("--samples", type=int, default=DEFAULTS["samples"])
    p.add_argument("--seed", type=int, default=DEFAULTS["seed"])
    p.add_argument("--force", action="store_true")
    args = p.parse_args(argv)
    from seal_verl.dry_run import quiet_libraries

    quiet_libraries()
    try:
        mixed_stage(args.out, args.base, args.epochs, args.lr, args.samples, args.seed, args.force)
    except (base_ws.WarmStartError, ValueError, FileNotFoundError) as e:
        print(f"warm-start: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
