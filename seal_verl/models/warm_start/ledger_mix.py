"""The last stage of the ledger warm start: a policy that mixes right and wrong behaviours, for RL to sharpen.

    python -m seal_verl.models.warm_start.ledger_mix OUT_DIR --base MODEL_DIR [--epochs N] [--lr X] [--samples K] [--force]

After the four supervised stages (:mod:`seal_verl.models.warm_start.ledger`) the tiny model calls the right tool on most
turns and errs mostly in the arguments (which account, which amount). Copying arguments is what a 0.4M-parameter
model learns slowest: from that model GRPO did not raise the reward within 20 steps at any learning rate tried
(docs/benchmarks.md). This stage fine-tunes it further on the same ground-truth rows plus, for every training
task and cue state, one scripted *failing* trajectory of the same task: no call where one is due
(``missing_tool_call``), the opposite state change (``state_mismatch``), or a malformed call
(``invalid_tool_call``), the kind cycling over the tasks. The model thus ends with a behaviour mix, right on
some samples and wrong in labelled ways on others, as a partly trained agent is; which choice is right is
learnable from the reward within a few steps. Failing rows are rendered under the same cue states as the right
ones (none, every cue kind on), so cue text carries no hint of which to choose: SEAL's environment side starts
level with vanilla GRPO. Each failing trajectory is a scripted plan (``seal_verl.rollouts.PlanBook``) whose
labels the environment's verifier and Psi confirmed; the agent loop must reproduce them, or the row is dropped.
Cached like the other stages (fingerprint of the rows, the base model, the settings and the code).
"""

from __future__ import annotations

import sys
from typing import Optional

from seal_verl.models.warm_start import ledger as L
from seal_verl.models.warm_start import pipeline as P
from seal_verl.models.warm_start import target as T

#: the failure kinds mixed in, cycled over the training tasks (a task that cannot show one takes the next)
MIX_KINDS = ("missing_tool_call", "state_mismatch", "invalid_tool_call")
DEFAULTS = {"epochs": 10, "lr": 3e-3, "samples": 1, "seed": 0}


def failure_plans(task_ids: list[str], kinds: tuple = MIX_KINDS) -> dict:
    """``{task_id: Plan}``: per task a verified failing plan, trying the kinds from ``kinds[i % len(kinds)]`` on."""
    from seal_verl import rollouts
    env = rollouts.environment(L.ENV)
    book = rollouts.PlanBook("json", 0, env=L.ENV)
    plans = {}
    for i, tid in enumerate(task_ids):
        task = env.load_task(tid)
        for j in range(len(kinds)):
            plan = book.get(task, kinds[(i + j) % len(kinds)], tid)
            if plan is not None:
                plans[tid] = plan
                break
    return plans


def render_failure_rows(model: str, plans: dict, out: str) -> tuple[list[dict], list[str]]:
    """The failing plans played through verl's real agent loop under no cue and under every cue kind on.
    Returns ``(rows, dropped)``: a row is kept only when the loop's labels are the plan's."""
    rows, dropped = L.render_scripted(model, list(plans), out, lambda task: plans[task.id],
                                      expected={t: p.labels for t, p in plans.items()})
    return [dict(r, failure=plans[r["task_id"]].target) for r in rows], dropped


def mixed_stage(out: str, base: str, epochs: int = DEFAULTS["epochs"], lr: float = DEFAULTS["lr"],
                samples: int = DEFAULTS["samples"], seed: int = DEFAULTS["seed"], force: bool = False) -> dict:
    """Build (or reuse) the mixed model in ``out`` from ``base``; returns its ``warm_start.json`` contents."""
    from seal_verl import rollouts
    train_ids = rollouts.environment(L.ENV).task_ids("train")

    def failing_rows(model: str, folder: str) -> list[dict]:
        rows, dropped = render_failure_rows(model, failure_plans(train_ids), folder)
        if len({r["task_id"] for r in rows}) < len(train_ids) // 2:
            raise T.WarmStartError(f"failing rows for only {len({r['task_id'] for r in rows})} of "
                                   f"{len(train_ids)} tasks: {'; '.join(dropped[:4])}")
        return rows

    # target 1.0: no task leaves the mix early (its ground truth can no longer reach probability 1)
    return L.warm_start(out, base, epochs, lr, samples, seed, 1.0, force, more_rows=failing_rows,
                        more_params={"kinds": list(MIX_KINDS), "mix_code": P.file_digest(__file__)})


def main(argv: Optional[list[str]] = None) -> int:
    return P.cli(argv, "python -m seal_verl.models.warm_start.ledger_mix", __doc__,
                 lambda a: mixed_stage(a.out, a.base, a.epochs, a.lr, a.samples, a.seed, a.force),
                 DEFAULTS, "the four-stage ledger warm start to start from", target=False)


if __name__ == "__main__":
    sys.exit(main())
