"""tau2-bench without a language model: scripted trajectories through tau2's own environment and evaluator.

Runs only in the tau2 environment (``make tau2-env`` builds ``.venv-tau2``; tau2 is not installed in the
training or test environments). Two scripted policies, each scored by tau2's ``evaluate_simulation`` exactly
as its runner scores a real simulation (``EvaluationType.ALL``: database end state, environment assertions,
action matching and "communicate" checks, as the task's reward basis says):

- ``gold``: every gold action of the task is executed, by its requestor (agent or user), through the task's
  freshly initialised environment, the tool results recorded as tau2 records them, and a closing agent
  message that says every string the task expects to be communicated; then the agent stops. A correct
  harness scores 1.0 on every task: this checks that environment, tasks and evaluator are intact.
- ``nothing``: the do-nothing baseline. The agent greets and stops without a single tool call. Tasks whose gold
  actions only read and that have no communicate check pass this way; the baseline says how many, per domain,
  and belongs beside every tau2 score.

    python -m env_wrappers.tau2.replay --domain airline --policy nothing [--limit N] [--split base]

prints one JSON object: ``{"domain", "policy", "split", "n", "passed", "pass_rate", "rewards": {task_id: r}}``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

DOMAINS = ("airline", "retail", "telecom")
POLICIES = ("gold", "nothing")


def _setup_logging() -> None:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    from loguru import logger

    logger.remove()
    logger.add(sys.stderr, level="ERROR")


def scripted_messages(domain: str, task, policy: str) -> list:
    """The trajectory of ``policy`` on ``task`` (tau2 message objects), tool results from a live environment."""
    from tau2.data_model.message import AssistantMessage, ToolCall, UserMessage
    from tau2.registry import registry

    history = list(task.initial_state.message_history or []) if task.initial_state else []
    if policy == "nothing":
        return history + [AssistantMessage(role="assistant", content="Hello! How can I help you today?")]
    env = registry.get_env_constructor(domain)()
    init = task.initial_state
    env.set_state(initialization_data=init.initialization_data if init else None,
                  initialization_actions=init.initialization_actions if init else None,
                  message_history=history)
    messages = list(history)
    criteria = task.evaluation_criteria
    for k, action in enumerate((criteria.actions if criteria else None) or []):
        call = ToolCall(id=f"gold_{k}", name=action.name, arguments=dict(action.arguments),
                        requestor=action.requestor)
        if action.requestor == "user":
            messages.append(UserMessage(role="user", tool_calls=[call]))
        else:
            messages.append(AssistantMessage(role="assistant", tool_calls=[call]))
        messages.append(env.get_response(call))
    said = [str(x) for x in ((criteria.communicate_info if criteria else None) or [])]
    messages.append(AssistantMessage(role="assistant", content=" ".join(said) or "Done."))
    return messages


def score_task(domain: str, task, policy: str) -> float:
    """tau2's reward for the scripted trajectory (the agent ends the conversation)."""
    from tau2.data_model.simulation import SimulationRun, TerminationReason
    from tau2.evaluator.evaluator import EvaluationType, evaluate_simulation

    messages = scripted_messages(domain, task, policy)
    now = time.strftime("%Y-%m-%dT%H:%M:%S")
    sim = SimulationRun(id=f"{policy}-{task.id}", task_id=task.id, start_time=now, end_time=now, duration=0.0,
                        termination_reason=TerminationReason.AGENT_STOP, messages=messages)
    info = evaluate_simulation(simulation=sim, task=task, evaluation_type=EvaluationType.ALL, solo_mode=False,
                               domain=domain)
    return float(info.reward)


def run(domain: str, policy: str, split: str = "base", limit: int | None = None, ids: list | None = None) -> dict:
    from tau2.registry import registry

    if domain not in DOMAINS:
        raise ValueError(f"--domain must be one of {', '.join(DOMAINS)}, got {domain!r}")
    if policy not in POLICIES:
        raise ValueError(f"--policy must be one of {', '.join(POLICIES)}, got {policy!r}")
    tasks = registry.get_tasks_loader(domain)(split)
    if ids:
        tasks = [t for t in tasks if t.id in set(ids)]
    if limit is not None:
        tasks = tasks[:limit]
    rewards = {t.id: score_task(domain, t, policy) for t in tasks}
    passed = sum(r >= 1.0 for r in rewards.values())
    return {"domain": domain, "policy": policy, "split": split, "n": len(rewards), "passed": passed,
            "pass_rate": passed / len(rewards) if rewards else 0.0, "rewards": rewards}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m env_wrappers.tau2.replay", description=__doc__.split("\n\n")[0])
    p.add_argument("--domain", required=True, choices=DOMAINS)
    p.add_argument("--policy", default="gold", choices=POLICIES)
    p.add_argument("--split", default="base", help="tau2 task split (default: base, the published task set)")
    p.add_argument("--limit", type=int, default=None, help="only the first N tasks")
    p.add_argument("--ids", nargs="+", default=None, help="only these task ids")
    args = p.parse_args(argv)
    _setup_logging()
    try:
        out = run(args.domain, args.policy, args.split, args.limit, args.ids)
    except (ValueError, KeyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
