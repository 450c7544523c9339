"""A second tool environment (``tests/envs/mock_shop``) through SEAL's generic glue, with no code of its own there.

The environment is one folder written against ``env_wrappers.protocol``; here it is registered by name and
then runs through the registry, the generic reward function and Psi, verl's real ``AgentLoopWorker`` with the
generic ``seal_env`` / ``env`` loops, and the whole dry run (verl's dataset, reward loop and advantage path,
the closed loop). The BFCL-specific code is never asked for: the test fails if the glue reaches for it.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "envs"))

from env_wrappers.registry import get_environment, register_environment  # noqa: E402

ENV = "mock_shop"
register_environment(ENV, "mock_shop:ShopEnvironment", replace=True)


@pytest.fixture(scope="module")
def env():
    return get_environment(ENV)


def _reward(trace, **kw):
    from reward_fns.seal_reward import compute_score

    return compute_score(data_source=trace.category, solution_str="", ground_truth="",
                         extra_info={"seal_trace": trace.to_json(), "task_id": trace.task_id}, **kw)


def test_registry_resolves_names_and_import_paths(env):
    from mock_shop import ShopEnvironment

    assert isinstance(env, ShopEnvironment) and env.name == ENV
    assert get_environment("mock_shop:ShopEnvironment").call_formats == ("json",)
    with pytest.raises(KeyError, match="unknown environment 'no_such_env'"):
        get_environment("no_such_env")
    with pytest.raises(ValueError, match="already registered"):
        register_environment(ENV, "mock_shop:Cart")


def test_reward_and_psi_on_scripted_rollouts(env):
    from seal_verl import dry_run as D
    task = env.load_task("shop_1")
    trace = D.replay_plan(task, env.reference_turns(task, "json"), "json", ENV)
    trace.meta["env"] = ENV
    out = _reward(trace)
    assert out["score"] == 1.0 and out["acc"] == 1.0
    assert json.loads(out["seal_labels"]) == ["pass", "pass", "pass"]

    expected = {"invalid_tool_call", "argument_mismatch", "state_mismatch", "missing_tool_call"}
    for target in sorted(expected):
        plan = D.find_plan(task, target, "json", env=ENV)
        assert plan is not None, target
        trace = D.replay_plan(task, plan.messages, "json", ENV)
        trace.meta["env"] = ENV
        out = _reward(trace)
        assert out["score"] == 0.0 and out["acc"] == 0.0
        assert json.loads(out["seal_labels"]) == plan.labels and target in plan.labels
        assert out[f"seal_p_{target}"] > 0

    # abstention: a call where the agent must ask fails the training reward, not the official verdict
    ask = env.load_task("shop_2")
    plan = D.find_plan(ask, "spurious_tool_call", "json", env=ENV)
    trace = D.replay_plan(ask, plan.messages, "json", ENV)
    trace.meta["env"] = ENV
    strict, lenient = _reward(trace), _reward(trace, strict_abstention=False)
    assert json.loads(strict["seal_labels"])[0] == "spurious_tool_call"
    assert (strict["score"], strict["acc"], lenient["score"]) == (0.0, 1.0, 1.0)

    # a rollout that names no environment cannot be graded by the generic function
    trace.meta.pop("env")
    with pytest.raises(KeyError, match="no environment named"):
        _reward(trace)


def test_hostile_call_text_is_a_label_not_code(env):
    task = env.load_task("shop_3")
    episode = env.start(task, call_format="json")
    episode.reset()
    out = episode.step('<tool_call>\n{"name": "__class__", "arguments": {"x": "__import__(\'os\')"}}\n</tool_call>')
    assert out.tool_results[0].is_error and "no tool named" in out.tool_results[0].content
    episode.step("ok")
    episode.trace.meta["env"] = ENV
    assert json.loads(_reward(episode.trace)["seal_labels"]) == ["invalid_tool_call"]


def test_generic_agent_loops_in_verls_worker(env, tmp_path):
    """verl's AgentLoopWorker runs ``seal_env`` rows of the mock environment; rewards through verl's reward loop."""
    from transformers import AutoTokenizer

    from seal_verl import dry_run as D

    model = D.tiny_model(str(tmp_path / "model"))
    yaml_path = D.write_agent_loop_yaml(str(tmp_path / "loops.yaml"), "json", env=ENV)
    config = D.verl_config(model, agent_loop_yaml=yaml_path, rollouts=1, prompt_length=4096, response_length=2048,
                           reward_path=D.reward_fn_path(ENV))
    tok = AutoTokenizer.from_pretrained(model)
    tasks = {t: env.load_task(t) for t in env.task_ids("train")}
    llm = D.ScriptedLLM(tok, tasks, env=ENV)
    plans = {"shop_0": D.find_plan(tasks["shop_0"], "pass", "json", env=ENV),
             "shop_1": D.find_plan(tasks["shop_1"], "argument_mismatch", "json", env=ENV)}
    for tid, plan in plans.items():
        llm.queue(tid, [plan])
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        worker = D.make_worker(config, llm)
        rows = D.dataset_rows(list(plans), "seal_env", "train", "json", ENV)
        assert all(r["extra_info"]["env"] == ENV for r in rows)
        batch = D.load_batch(D.write_parquet(rows, str(tmp_path / "rows.parquet")), config, tok, 1)
        gen = loop.run_until_complete(worker.generate_sequences(batch))
    finally:
        loop.close()
        asyncio.set_event_loop(None)
    for i in range(len(gen)):
        trace = json.loads(gen.non_tensor_batch["seal_trace"][i])
        assert trace["meta"]["env"] == ENV and trace["meta"]["agent_loop"] == "seal_env"
        labels = json.loads(gen.non_tensor_batch["seal_labels"][i])
        assert labels == plans[trace["task_id"]].labels
        assert float(gen.non_tensor_batch["score"][i]) == (1.0 if trace["task_id"] == "shop_0" else 0.0)


def test_dry_run_trains_the_second_environment(tmp_path):
    """The whole dry run (verl's dataset, agent-loop worker, reward loop, compute_advantage with seal_grpo, the
    closed loop) on the mock environment; validation through the ``env`` loop carries no cue."""
    from seal_verl import dry_run as D
    cfg = D.DryRunConfig(out=str(tmp_path / "run"), env=ENV, steps=3, tasks_per_step=2, rollouts=3, val_tasks=1,
                         prompt_length=4096, response_length=2048, progress=False, verbose=False)
    rows = D.run_dry(cfg)
    assert len(rows) == 3
    run = tmp_path / "run"
    seen = set()
    for step in range(1, 4):  # numbered by the global step, as in a training run
        assert (run / f"state_step_{step}.json").exists()
        for line in (run / f"traces_step_{step}.jsonl").read_text().splitlines():
            rec = json.loads(line)
            assert rec["trace"]["meta"]["env"] == ENV and rec["agent_loop"] == "seal_env"
            assert rec["plan"] is not None and rec["labels"] == rec["plan"]["labels"]
            seen.update(rec["labels"])
    assert {"pass", "invalid_tool_call"} <= seen and len(seen) >= 3
    assert any(r["active_next"] for r in rows), "no cue family switched on from the mock environment's failures"
    val = [json.loads(x) for x in (run / "val_traces.jsonl").read_text().splitlines()]
    assert val and all(v["agent_loop"] == "env" and v["cue_tokens"] == 0 and not v["hint_in_text"] for v in val)
    assert all(v["score"] == 1.0 for v in val)
