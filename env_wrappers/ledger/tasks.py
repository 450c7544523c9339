"""Seeded task generation of the ledger environment: families of short multi-turn banking requests.

A task is a list of user turns and, per turn, the ground-truth calls. Arguments (account names, amounts,
opening balances) are drawn from a seed, so the training and held-out splits share the families but not the
argument combinations: a model that passes held-out tasks has learnt to read the request, not memorised it.
Some ground-truth arguments depend on a tool result (``sweep``: move an account's whole balance), so the model
must react to an observation, and one family ends with a request that lacks a detail (``ask``): the right
answer is a question, a call there is spurious.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

#: Few names and one-digit amounts: a 0.4M-parameter model gets the structure right quickly and its errors are
#: then mostly in reading the request (which account, which amount), which is what RL has to sharpen.
ACCOUNTS = ("alice", "bob", "carol", "dave")

#: family -> user-turn templates (two phrasings per turn; the seed picks one) and the ground-truth builder.
FAMILIES = ("deposit_check", "withdraw_deposit", "transfer_ask", "check_withdraw", "sweep")

TRAIN_SEED = 1234
EVAL_SEED = 98765
N_TRAIN = 64
N_EVAL = 32


@dataclass
class LedgerTask:
    """One task: ``turns`` (user text per turn), ``ground_truth`` (calls per turn, empty = ask instead),
    ``balances`` (the opening state), ``category`` (the family)."""

    id: str
    category: str
    balances: dict
    turns: list
    ground_truth: list
    key: tuple = field(default=(), repr=False)


def _call(name: str, **arguments) -> dict:
    return {"name": name, "arguments": arguments}


def _pick(rng: random.Random, *options: str) -> str:
    return rng.choice(options)


def make_task(task_id: str, family: str, rng: random.Random) -> LedgerTask:
    """A task of ``family`` with arguments drawn from ``rng``."""
    x, y, z = rng.sample(ACCOUNTS, 3)
    balances = {a: rng.randint(20, 90) for a in ACCOUNTS}
    a = rng.randint(1, 9)
    b = rng.randint(1, 9)
    if family == "deposit_check":
        turns = [_pick(rng, f"Deposit {a} into {x}.", f"Please add {a} to the account of {x}."),
                 _pick(rng, f"What is the balance of {x} now?", f"How much does {x} have now?")]
        gt = [[_call("deposit", account=x, amount=a)], [_call("get_balance", account=x)]]
        key = (family, x, a)
    elif family == "withdraw_deposit":
        turns = [_pick(rng, f"Withdraw {a} from {x}.", f"Take {a} out of the account of {x}."),
                 _pick(rng, f"Now deposit {b} into {y}.", f"Then add {b} to the account of {y}.")]
        gt = [[_call("withdraw", account=x, amount=a)], [_call("deposit", account=y, amount=b)]]
        key = (family, x, a, y, b)
    elif family == "transfer_ask":
        turns = [_pick(rng, f"Transfer {a} from {x} to {y}.", f"Send {a} from {x} to {y}."),
                 _pick(rng, f"Also send some money to {z}.", f"Give {z} a bit of money too.")]
        gt = [[_call("transfer", source=x, target=y, amount=a)], []]
        key = (family, x, y, a, z)
    elif family == "check_withdraw":
        turns = [_pick(rng, f"How much does {x} have?", f"What is the balance of {x}?"),
                 _pick(rng, f"Withdraw {a} from {y}.", f"Take {a} out of the account of {y}.")]
        gt = [[_call("get_balance", account=x)], [_call("withdraw", account=y, amount=a)]]
        key = (family, x, y, a)
    elif family == "sweep":
        turns = [_pick(rng, f"Move all the money of {x} to {y}.", f"Transfer the whole balance of {x} to {y}."),
                 _pick(rng, f"What is the balance of {y} now?", f"How much does {y} have now?")]
        gt = [[_call("get_balance", account=x), _call("transfer", source=x, target=y, amount=balances[x])],
              [_call("get_balance", account=y)]]
        key = (family, x, y, balances[x])
    else:
        raise ValueError(f"unknown ledger family {family!r}")
    return LedgerTask(id=task_id, category=family, balances=balances, turns=turns, ground_truth=gt, key=key)


def generate(prefix: str, n: int, seed: int, exclude: frozenset = frozenset()) -> list[LedgerTask]:
    """``n`` tasks cycling over the families, arguments from ``seed``; argument combinations in ``exclude``
    (another split's) are drawn again."""
    rng = random.Random(seed)
    tasks, seen = [], set(exclude)
    i = 0
    while len(tasks) < n:
        family = FAMILIES[len(tasks) % len(FAMILIES)]
        task = make_task(f"{prefix}_{len(tasks):03d}", family, rng)
        i += 1
        if task.key in seen:
            continue
        seen.add(task.key)
        tasks.append(task)
    return tasks


def all_tasks() -> dict[str, dict[str, LedgerTask]]:
    """``{"train": {id: task}, "eval": {id: task}}``: 64 training and 32 held-out tasks, disjoint arguments."""
    train = generate("ledger_train", N_TRAIN, TRAIN_SEED)
    held = generate("ledger_eval", N_EVAL, EVAL_SEED, exclude=frozenset(t.key for t in train))
    return {"train": {t.id: t for t in train}, "eval": {t.id: t for t in held}}
