"""``seal-verl check``'s ``adapter`` check (seal_verl.runs.adapter_sync) on the metrics a LoRA run writes.

The rows are what the trainer logs per step (``seal/sync/*``, ``actor/grad_norm``). A synced run: the rollout stays
within the first step's noise of the actor while the adapter moves away from the reference. A run whose rollout never
received the adapter (verl issue 7495, the planted fault skip_weight_sync): the rollout stays at the reference. A run
one sync behind: the rollout is off by the last update. The real runs through main_ppo (both ways) are in
tests/cpu_training/test_lora_main_ppo.py.
"""

from __future__ import annotations

from seal_verl.runs.adapter_sync import adapter_sync_problems, lora_of


def row(step, ra, rr, ar, grad=0.5):
    return {"global_step": step, "metrics": {"seal/sync/rollout_vs_actor": ra, "seal/sync/rollout_vs_ref": rr,
                                             "seal/sync/actor_vs_ref": ar, "actor/grad_norm": grad}}


NOISE = 1.5e-4
MOVES = [0.0, 2e-3, 4e-3, 6e-3]  # actor vs reference at the start of each step


def test_a_synced_run_passes():
    rows = [row(k + 1, NOISE, max(NOISE, a), a) for k, a in enumerate(MOVES)]
    problems, summary = adapter_sync_problems(rows)
    assert problems == [] and "steps [2, 3, 4]" in summary


def test_a_rollout_that_never_gets_the_adapter_fails():
    rows = [row(k + 1, max(NOISE, a), NOISE, a) for k, a in enumerate(MOVES)]
    problems, _ = adapter_sync_problems(rows)
    assert any("does not sample from the actor's adapter" in p for p in problems)
    assert any("did not reach the rollout" in p for p in problems)


def test_a_rollout_one_sync_behind_fails():
    rows = [row(1, NOISE, NOISE, 0.0)] + [row(k + 1, MOVES[k] - MOVES[k - 1], MOVES[k - 1] + NOISE, MOVES[k])
                                          for k in range(1, len(MOVES))]
    problems, _ = adapter_sync_problems(rows)
    assert any("step 2" in p for p in problems)


def test_an_adapter_that_never_moves_proves_nothing():
    rows = [row(k + 1, NOISE, NOISE, NOISE / 2) for k in range(4)]
    problems, _ = adapter_sync_problems(rows)
    assert any("never moved" in p for p in problems)


def test_only_runs_with_lora_are_checked():
    plain = {"verl": {"actor_rollout_ref": {"model": {"lora_rank": 0, "lora": {"merge": False}}}}}
    merged = {"verl": {"actor_rollout_ref": {"model": {"lora_rank": 8, "lora_alpha": 16, "lora": {"merge": True}}}}}
    assert lora_of(plain) is None and lora_of({}) is None
    assert lora_of(merged) == {"rank": 8, "alpha": 16, "merge": True}
