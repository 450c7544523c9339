"""Fine-tuning with transformers' ``Trainer`` on pre-tokenized rows, with a stopping rule per task.

The rows carry their label masks already, so the plain ``Trainer`` fits: TRL's ``SFTTrainer`` would re-render
conversations with the chat template and lose the agent loop's token boundaries, and verl's SFT trainer needs
torchrun and an FSDP device mesh, more CPU plumbing than a 0.4M-parameter model is worth."""

from __future__ import annotations

import math
import os
import shutil

from seal_verl.models.warm_start.target import WarmStartError


def trajectory_nll(model, rows: list[dict]) -> list[float]:
    """Per row: the summed negative log-likelihood of its trained tokens (teacher forcing, no gradient).

    ``exp(-nll)`` is the probability that sampling at temperature 1 reproduces the ground-truth trajectory token
    for token, a lower bound on the task's pass rate under the recipe's sampling."""
    import torch

    was_training = model.training
    model.eval()
    out = []
    with torch.no_grad():
        for r in rows:
            ids = torch.tensor([r["input_ids"]], dtype=torch.long)
            labels = torch.tensor(r["labels"][1:], dtype=torch.long)
            logits = model(input_ids=ids).logits[0, :-1].float()
            keep = labels != -100
            nll = torch.nn.functional.cross_entropy(logits[keep], labels[keep], reduction="sum")
            out.append(float(nll))
    if was_training:
        model.train()
    return out


def tasks_to_train(order: list[str], predicted: list[float], target: float) -> list[str]:
    """The tasks whose predicted pass rate is still below ``target``, in ``order``; training stops when none is.

    The rule is per task, not on the mean: a mean at the target can hide a task near 0 behind one near 1, and each
    of them gives GRPO groups of a single outcome, hence no learning signal."""
    if len(order) != len(predicted):
        raise WarmStartError(f"{len(order)} tasks but {len(predicted)} predicted pass rates")
    return [t for t, p in zip(order, predicted) if not p >= target]


def fine_tune(base: str, rows: list[dict], out_model: str, max_epochs: int, lr: float, seed: int,
              target: float) -> list[dict]:
    """transformers' ``Trainer`` on the pre-tokenized rows (batch 1, AdamW, cosine decay over ``max_epochs`` after a
    one-epoch warm-up), with a stopping rule per task: ``exp(-nll)`` of a task's ground truth is the probability of
    sampling it exactly, a lower bound on its pass rate; once it reaches ``target`` the task leaves the training
    mix, and training stops when every task has reached it. Each task thus ends partly right rather than one
    memorised and another never passed: a task the model always fails (or always passes) gives a GRPO group with
    one outcome, which carries no learning signal (a mean over tasks let one task sit at 0 while another neared 1).
    The first row of each task is what the rule measures (the ground truth under the first interface rendered).
    Returns the epoch log."""
    import random

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, Trainer, TrainerCallback, TrainingArguments

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32, attn_implementation="sdpa")
    tokenizer = AutoTokenizer.from_pretrained(base)
    by_task: dict[str, list[dict]] = {}
    for r in rows:
        by_task.setdefault(r["task_id"], []).append(r)
    order = list(by_task)
    # what the stopping rule measures: each task under the first (initial) interface it was rendered under
    probe = [rs[0] for rs in by_task.values()]

    #: the tasks still below the target (all of them at first); the rest have left the training mix
    active = list(order)

    class OneInterfacePerTask(torch.utils.data.Dataset):
        """Item i: a row of the i-th task still being trained (cycling over them), drawn at random (seeded) among
        the task's rows each time it is read. The length stays one item per task, so an epoch is the same number of
        optimizer steps whatever is left."""

        def __init__(self):
            self.rng = random.Random(seed)

        def __len__(self):
            return len(order)

        def __getitem__(self, i):
            r = self.rng.choice(by_task[active[i % len(active)]])
            return {"input_ids": r["input_ids"], "labels": r["labels"]}

    data = OneInterfacePerTask()

    def collate(batch):
        # batch size 1: nothing to pad
        return {"input_ids": torch.tensor([b["input_ids"] for b in batch], dtype=torch.long),
                "labels": torch.tensor([b["labels"] for b in batch], dtype=torch.long)}

    log: list[dict] = []

    class StopWhenPartlyRight(TrainerCallback):
        def on_epoch_end(self, args, state, control, model=None, **kw):
            nll = trajectory_nll(model, probe)
            predicted = [math.exp(-x) for x in nll]
            mean = sum(predicted) / len(predicted)
            still = tasks_to_train(order, predicted, target)
            log.append({"epoch": int(round(state.epoch or 0)), "nll": [round(x, 3) for x in nll],
                        "predicted_pass_rate": round(mean, 4), "reached": len(order) - len(still)})
            print(f"[warm-start] epoch {int(round(state.epoch or 0)):3d}  trajectory NLL "
                  f"{min(nll):6.2f}..{max(nll):6.2f}  predicted pass rate {min(predicted):.2f}..{max(predicted):.2f} "
                  f"(target {target:.2f} per task; {len(order) - len(still)}/{len(order)} there)", flush=True)
            if still:
                active[:] = still
            else:
                control.should_training_stop = True
            return control

    args = TrainingArguments(
        output_dir=os.path.join(out_model, ".trainer"), num_train_epochs=max_epochs, per_device_train_batch_size=1,
        learning_rate=lr, lr_scheduler_type="cosine", warmup_steps=len(data), weight_decay=0.0,
        logging_strategy="no", save_strategy="no", report_to=[], use_cpu=True, seed=seed, data_seed=seed,
        dataloader_num_workers=0, disable_tqdm=True, remove_unused_columns=False,
    )
    trainer = Trainer(model=model, args=args, train_dataset=data, data_collator=collate,
                      callbacks=[StopWhenPartlyRight()])
    trainer.train()
    model.save_pretrained(out_model, safe_serialization=True)
    tokenizer.save_pretrained(out_model)
    shutil.rmtree(os.path.join(out_model, ".trainer"), ignore_errors=True)
    return log
