"""The recipe budgets follow the measured token lengths (recipes/bfcl_v3/lengths/*.json, the table in
recipes/bfcl_v3/README.md), and those numbers are what the real tokenizers give today.

The lengths files hold, per task, the first prompt and the ground-truth trajectory (GT calls in the backbone's
call format, real observations from the BFCL environment) as measured by ``python -m
env_wrappers.bfcl.environment.lengths``. 42 long_context tasks have one ground-truth observation (20k-67k tokens) that
fits no budget; they are listed here and in the README, and every other task must fit.
"""

from __future__ import annotations

import json
import os

import pytest
from _paths import REPO
from _backbones import tokenizer

RECIPE = os.path.join(REPO, "recipes", "bfcl_v3")
GROUPS = {"qwen2.5-3b": "qwen2.5", "qwen2.5-7b": "qwen2.5", "qwen3-4b": "qwen3", "qwen3-8b": "qwen3",
          "toolace2-8b": "toolace2"}
#: long_context tasks with a single ground-truth observation longer than any budget (the same 42 for every backbone).
OVERLONG = sorted(
    f"multi_turn_long_context_{n}" for n in (
        100, 101, 103, 104, 105, 106, 107, 108, 109, 110, 112, 113, 114, 115, 116, 117, 118, 119, 120, 121, 123,
        124, 125, 126, 127, 128, 129, 131, 132, 133, 134, 135, 136, 137, 138, 141, 142, 144, 145, 146, 147, 148)
)


def _lengths(name: str) -> dict:
    with open(os.path.join(RECIPE, "lengths", f"{name}.json"), encoding="utf-8") as f:
        data = json.load(f)
    cols = data["columns"]
    return {tid: dict(zip(cols, row)) for tid, row in data["tasks"].items()}


def _compose(backbone: str):
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=os.path.join(RECIPE, "config"), version_base=None):
        return compose(config_name="bfcl_v3", overrides=[f"backbone={backbone}", "variant=seal",
                                                          f"recipe.dir={RECIPE}", "recipe.data_dir=/data"])


@pytest.mark.parametrize("group", sorted(GROUPS))
def test_recipe_budgets_hold_every_measured_trajectory(group):
    lengths = _lengths(GROUPS[group])
    assert len(lengths) == 800
    cfg = _compose(group)
    prompt, response = cfg.data.max_prompt_length, cfg.data.max_response_length
    rollout = cfg.actor_rollout_ref.rollout
    longest_prompt = max(v["prompt"] for v in lengths.values())
    assert prompt >= longest_prompt + 512, "room for start-of-task cues on the longest first prompt"
    over = sorted(t for t, v in lengths.items() if v["response"] > response)
    assert over == OVERLONG
    assert all(lengths[t]["max_obs"] > response for t in OVERLONG), "they fail on one observation, not on the sum"
    assert rollout.max_model_len >= prompt + response
    assert cfg.actor_rollout_ref.actor.ppo_max_token_len_per_gpu >= prompt + response
    # the GPU install has no flash-attn: attention and padding paths that run without it
    assert cfg.actor_rollout_ref.model.override_config.attn_implementation == "sdpa"
    assert cfg.actor_rollout_ref.model.use_remove_padding is False


@pytest.mark.parametrize("name", ["qwen2.5", "qwen3", "toolace2"])
def test_measured_lengths_are_current(name):
    """Re-measure the extreme tasks (longest prompts, longest fitting and overlong trajectories) now."""
    from env_wrappers.bfcl.environment.tasks import load_tasks
    from seal_verl.models.backbones import spec
    from env_wrappers.bfcl.environment.lengths import task_lengths

    stored = _lengths(name)
    fitting = {t: v for t, v in stored.items() if t not in OVERLONG}
    picks = {max(stored, key=lambda t: stored[t]["prompt"]), max(fitting, key=lambda t: fitting[t]["response"]),
             "multi_turn_miss_func_0", "multi_turn_base_0", OVERLONG[0]}
    tasks = load_tasks(sorted(picks))
    tok = tokenizer(name)
    for tid in sorted(picks):
        now = task_lengths(tok, tasks[tid], spec(name).call_format, spec(name).chat_template_kwargs)
        assert {k: now[k] for k in stored[tid]} == stored[tid], tid


#: tokens a measurement counts beyond the agent loop's stream: the re-render's newline after the last <|im_end|>
RE_RENDER_EXTRA = {"qwen2.5": 1, "qwen3": 0}


@pytest.mark.parametrize("name", ["qwen2.5", "qwen3"])
def test_measured_response_side_is_the_stream_verls_agent_loop_builds(name, tmp_path):
    """The ground-truth trajectory played through verl's real AgentLoopWorker (a scripted LLM answering with the
    ground truth, the recipe's chat-template arguments): its response side has exactly the measured token count.
    For Qwen3 in non-thinking mode the measurement follows the loop's token stream, not a re-render; Qwen2.5's
    re-render counts one token more than the stream (the newline the template writes after the last end token),
    on the safe side of the budget."""
    import asyncio

    from _backbones import tiny_model_dir

    from env_wrappers.bfcl.environment.tasks import load_tasks
    from seal_verl import dry_run as D
    from seal_verl.models.backbones import spec

    s = spec(name)
    stored = _lengths(name)
    ids = ["multi_turn_base_0", "multi_turn_miss_func_0"]
    tasks = load_tasks(ids)
    tok = tokenizer(name)
    book = D.PlanBook(s.call_format)
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        config = D.verl_config(tiny_model_dir(name), rollouts=1, prompt_length=8192, response_length=8192,
                               agent_loop_yaml=D.write_agent_loop_yaml(str(tmp_path / "loops.yaml"), s.call_format),
                               overrides=[f"+data.apply_chat_template_kwargs.{k}={str(v).lower()}"
                                          for k, v in s.chat_template_kwargs.items()])
        llm = D.ScriptedLLM(tok, tasks, eos_token=s.eos)
        for tid in ids:
            llm.queue(tid, [book.get(tasks[tid], "pass")])
        worker = D.make_worker(config, llm)
        path = D.write_parquet(D.dataset_rows(ids, "bfcl", "eval", s.call_format), str(tmp_path / "rows.parquet"))
        out = loop.run_until_complete(worker.generate_sequences(D.load_batch(path, config, tok, 1)))
    finally:
        loop.close()
        asyncio.set_event_loop(None)
    n_prompt = out.batch["prompts"].shape[1]
    for i, tid in enumerate(ids):
        mask = out.batch["attention_mask"][i]
        assert int(mask[:n_prompt].sum()) == stored[tid]["prompt"], tid
        assert int(mask[n_prompt:].sum()) + RE_RENDER_EXTRA[name] == stored[tid]["response"], tid
