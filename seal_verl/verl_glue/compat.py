"""The places where SEAL's trainer glue writes into verl's TransferQueue fields, checked against verl 0.9.1.

verl's V1 trainer keeps a step's rollouts in TransferQueue as jagged (nested) tensors, one row per rollout. verl
itself rewrites ``response_mask`` there after its advantage computation when rollout correction rejects samples
(``verl/trainer/ppo/v1/trainer_base.py``, ``PPOTrainer._compute_advantage``); SEAL does the same to keep the
rollouts whose verification raised out of the update.
"""

from __future__ import annotations

from typing import Sequence

TESTED_VERL = "0.9.1"


def exclude_rows_from_update(batch, excluded: Sequence[bool]) -> None:
    """Zero ``response_mask`` and ``advantages`` of the rows marked in ``excluded`` in TransferQueue, so that the
    actor update (policy loss, KL term, token-mean denominator) ignores them.

    Args:
        batch: the step's ``KVBatchMeta`` (keys in row order).
        excluded: one flag per row of ``batch``.
    """
    import torch
    import transfer_queue as tq
    from tensordict import TensorDict

    if len(excluded) != len(batch.keys):
        raise ValueError(f"{len(excluded)} exclusion flags for {len(batch.keys)} rows")
    data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id,
                           select_fields=["response_mask", "advantages"])
    out = {}
    for name in ("response_mask", "advantages"):
        value = data[name]
        rows = list(value.unbind()) if getattr(value, "is_nested", False) else list(value)
        rows = [torch.zeros_like(r) if ex else r for r, ex in zip(rows, excluded)]
        out[name] = torch.nested.as_nested_tensor(rows, layout=torch.jagged)
    tq.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id, fields=TensorDict(out, batch_size=len(batch)))
