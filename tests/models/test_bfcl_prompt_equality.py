"""The prompts the agent loop builds equal, as text, what bfcl-eval's own handler renders for the backbone.

For all 800 BFCL V3 multi-turn tasks and every GPU backbone's tokenizer (Qwen2.5, Qwen3, ToolACE-2): the first-turn prompt, and for miss_func tasks the
prompt at the reveal turn (every earlier turn answered with a text reply). The loop side is the agent loop's
own prompt helpers (``_initial_messages``, ``_reveal_messages``) on the real BFCL environment, rendered by the
backbone's real chat template with the recipe's chat-template arguments (Qwen3: ``enable_thinking=False``); the
BFCL side is ``QwenFCHandler`` (the handler bfcl-eval maps the local Qwen3 models to) / ``LlamaHandler`` (the one it
maps ToolACE-2-8B to) run through their own set-up, message and formatting methods.

Every difference kept is listed in ``KNOWN_DIFFERENCES`` with its reason; the test fails on any other
difference and also when a listed one no longer occurs.
"""

from __future__ import annotations

import pytest
from _backbones import require_handlers, tokenizer

from seal_verl.models.backbones import spec
from seal_verl.models.backbones.templates import QWEN25_DEFAULT_SYSTEM

ANSWER = "Done."

#: backbone -> (text the loop's prompt has, text bfcl-eval's prompt has instead at the same place, reason).
KNOWN_DIFFERENCES = {
    "qwen2.5": [(
        "<|im_start|>system\n" + QWEN25_DEFAULT_SYSTEM + "\n\n# Tools",
        "<|im_start|>system\n# Tools",
        "Qwen2.5-Instruct's released chat template writes its default system line in front of the tool block "
        "when the conversation has no system message; bfcl-eval 2026.3.23's QwenFCHandler formats prompts "
        "after Qwen3's template, which has no such line. The loop renders with the tokenizer's own template "
        "(what a GPU user's checkpoint and vLLM's chat endpoint use), so the line stays.",
    )],
    "qwen3": [(
        "<|im_start|>assistant\n<think>\n\n</think>\n\n",
        "<|im_start|>assistant\n",
        "The recipe runs Qwen3 in non-thinking mode (data.apply_chat_template_kwargs.enable_thinking=false, "
        "recipes/bfcl_v3/config/backbone/qwen3-*.yaml): Qwen3's template then ends the generation prompt with an "
        "empty thinking block, the branch bfcl-eval's QwenFCHandler quotes but does not render (it leaves thinking "
        "on and strips the reasoning from the answer). Everything before the generation prompt is the same text.",
    )],
    "toolace2": [],
}


def _loop_prompt(tok, fmt, task, upto, template_kwargs=None):
    from env_wrappers.bfcl.environment.env import BFCLEnv
    from env_wrappers.bfcl.environment import prompts
    from seal_verl.verl_glue.agent_loop import EnvAgentLoopBase

    loop = object.__new__(EnvAgentLoopBase)  # only its tool-message helper is used

    loop.call_format, loop.system_prompt = fmt, None

    _fmt = fmt
    env = BFCLEnv(task, call_format=fmt)
    messages, tools = prompts.initial_messages(task, env.reset(), _fmt)
    while env.turn < upto:
        messages.append({"role": "assistant", "content": ANSWER})
        result = env.step(ANSWER)
        assert result.turn_done and not result.episode_done
        messages.extend(prompts.reveal_messages(task, env.turn, list(result.next_user or []),
                                              list(result.revealed_tools or []), _fmt))
    return tok.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False,
                                   **(template_kwargs or {}))


@pytest.mark.parametrize("backbone,fmt", [("qwen2.5", "json"), ("qwen3", "json"), ("toolace2", "python")])
def test_prompts_equal_bfcl_handler_for_all_tasks(backbone, fmt):
    require_handlers()
    from env_wrappers.bfcl.environment.handler_prompts import handler_prompt, reveal_turn
    from env_wrappers.bfcl.environment.tasks import load_tasks

    tok = tokenizer(backbone)
    tasks = load_tasks()
    assert len(tasks) == 800
    compared, used, bad = 0, set(), []
    for tid, task in tasks.items():
        for upto in [0] + ([reveal_turn(task)] if reveal_turn(task) else []):
            ours = _loop_prompt(tok, fmt, task, upto, spec(backbone).chat_template_kwargs)
            theirs = handler_prompt(backbone, tid, upto, ANSWER)
            compared += 1
            for i, (loop_text, bfcl_text, _) in enumerate(KNOWN_DIFFERENCES[backbone]):
                if loop_text in ours:
                    used.add(i)
                    ours = ours.replace(loop_text, bfcl_text, 1)
            if ours != theirs:
                bad.append((tid, upto))
    assert compared == 800 + 200  # every first turn + every miss_func reveal turn
    assert not bad, f"{len(bad)} prompts differ from bfcl-eval's beyond the listed differences: {bad[:5]}"
    assert used == set(range(len(KNOWN_DIFFERENCES[backbone]))), "a listed difference no longer occurs"


def test_reveal_prompt_carries_bfcl_reveal_text_and_docs():
    """The reveal turn's user message: the held-out docs as bfcl-eval formats them, then its reveal text."""
    from env_wrappers.bfcl.environment.env import REVEAL_MESSAGE
    from env_wrappers.bfcl.environment.handler_prompts import reveal_turn
    from env_wrappers.bfcl.environment.tasks import load_tasks

    task = load_tasks(["multi_turn_miss_func_0"])["multi_turn_miss_func_0"]
    k = reveal_turn(task)
    for backbone, fmt in (("qwen2.5", "json"), ("toolace2", "python")):
        text = _loop_prompt(tokenizer(backbone), fmt, task, k)
        assert str(task.missed_functions[k]) + "\n" + REVEAL_MESSAGE in text
        first = _loop_prompt(tokenizer(backbone), fmt, task, 0)
        assert all(f"'name': '{d['name']}'" not in first and f'"name": "{d["name"]}"' not in first
                   for d in task.missed_functions[k])


@pytest.mark.parametrize("backbone,fmt,eos", [("qwen2.5", "json", "<|im_end|>"), ("qwen3", "json", "<|im_end|>"),
                                              ("toolace2", "python", "<|eot_id|>")])
def test_real_agent_loop_builds_these_prompt_tokens(backbone, fmt, eos, tmp_path):
    """Through verl's real AgentLoopWorker (scripted LLM) on a tiny model with the real tokenizer: the prompt
    token ids are the tokenization of the prompt text compared above, and the reveal message is BFCL's. The
    recipe's chat-template arguments reach verl as the recipe passes them (``data.apply_chat_template_kwargs``)."""
    import asyncio

    from _backbones import tiny_model_dir

    from env_wrappers.bfcl.environment.env import REVEAL_MESSAGE
    from env_wrappers.bfcl.environment.tasks import load_tasks
    from seal_verl import dry_run as D
    model = tiny_model_dir(backbone)
    tok = tokenizer(backbone)
    ids = ["multi_turn_base_0", "multi_turn_long_context_0", "multi_turn_miss_func_0"]
    tasks = load_tasks()
    book = D.PlanBook(fmt)
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        yaml_path = D.write_agent_loop_yaml(str(tmp_path / "loops.yaml"), fmt)
        kwargs = spec(backbone).chat_template_kwargs
        config = D.verl_config(model, agent_loop_yaml=yaml_path, rollouts=1, prompt_length=16384,
                               overrides=[f"+data.apply_chat_template_kwargs.{k}={str(v).lower()}"
                                          for k, v in kwargs.items()])
        llm = D.ScriptedLLM(tok, tasks, eos_token=eos)
        for tid in ids:
            llm.queue(tid, [book.get(tasks[tid], "pass")])
        worker = D.make_worker(config, llm)
        path = D.write_parquet(D.dataset_rows(ids, "bfcl", "eval", fmt), str(tmp_path / "rows.parquet"))
        out = loop.run_until_complete(worker.generate_sequences(D.load_batch(path, config, tok, 1)))
    finally:
        loop.close()
        asyncio.set_event_loop(None)
    for i, tid in enumerate(ids):
        n = out.batch["prompts"].shape[1]
        prompt_ids = out.batch["prompts"][i][out.batch["attention_mask"][i, :n].bool()].tolist()
        text = _loop_prompt(tok, fmt, tasks[tid], 0, kwargs)
        assert prompt_ids == tok.encode(text, add_special_tokens=False), tid
        if tasks[tid].missed_functions:
            _, _, obs = D.rollout_texts(out, tok, i)
            k = min(tasks[tid].missed_functions)
            assert str(tasks[tid].missed_functions[k]) + "\n" + REVEAL_MESSAGE in obs


@pytest.mark.parametrize("backbone,fmt", [("qwen2.5", "json"), ("qwen3", "json"), ("toolace2", "python")])
def test_eval_prompt_mode_sends_the_loop_prompt(backbone, fmt):
    """``seal-verl eval --mode prompt`` sends a served model the text verl's validation shows it: for all 800
    tasks, the system message + first user turn it posts, rendered by the backbone's chat template (as a chat
    server renders them), equal the agent loop's prompt; and the reveal turn's user message is the loop's. The
    server renders with the recipe's chat-template arguments (Qwen3: vLLM's ``--default-chat-template-kwargs
    '{"enable_thinking": false}'``, docs/evaluation.md)."""
    from env_wrappers.bfcl.environment.env import BFCLEnv
    from env_wrappers.bfcl.evaluation.runner import prompt_rendering
    from env_wrappers.bfcl.environment.handler_prompts import reveal_turn
    from env_wrappers.bfcl.environment.tasks import load_tasks

    tok = tokenizer(backbone)
    kwargs = spec(backbone).chat_template_kwargs
    system_prompt, reveal = prompt_rendering(fmt, backbone)
    bad = []
    for tid, task in load_tasks().items():
        env = BFCLEnv(task, call_format=fmt)
        sent = [{"role": "system", "content": system_prompt(task)}] + [dict(m) for m in env.reset()]
        served = tok.apply_chat_template(sent, add_generation_prompt=True, tokenize=False, **kwargs)
        if served != _loop_prompt(tok, fmt, task, 0, kwargs):
            bad.append((tid, 0))
        k = reveal_turn(task)
        if k:
            loop = _loop_prompt(tok, fmt, task, k, kwargs)
            while env.turn < k:
                sent.append({"role": "assistant", "content": ANSWER})
                result = env.step(ANSWER)
                sent.extend(reveal(task, env.turn, [dict(m) for m in result.next_user or []],
                                   list(result.revealed_tools or [])))
            if tok.apply_chat_template(sent, add_generation_prompt=True, tokenize=False, **kwargs) != loop:
                bad.append((tid, k))
    assert not bad, f"{len(bad)} prompts seal-verl eval sends differ from the agent loop's: {bad[:5]}"
