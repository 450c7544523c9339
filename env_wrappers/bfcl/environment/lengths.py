"""Token lengths of the BFCL tasks under a backbone's real tokenizer and chat template: the data behind the
recipe budgets.

Per task: the first prompt exactly as the agent loop renders it (system prompt, tool docs, first user turn,
generation prompt), and the full ground-truth trajectory: per turn one assistant step with the turn's
ground-truth calls in the backbone's call format, the real observations from executing them in the BFCL
environment, a closing text answer, the next user turn (miss_func reveals included). The response side is
everything after the prompt (model tokens + observation tokens: what ``data.max_response_length`` must hold).

    python -m env_wrappers.bfcl.environment.lengths --backbone qwen2.5|qwen3|toolace2 [--tokenizer DIR] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from typing import Optional


def task_lengths(tok, task, fmt: str, template_kwargs: Optional[dict] = None) -> dict:
    """``{"prompt", "response", "llm", "max_turn_llm", "max_obs"}`` token counts of ``task``'s GT trajectory.

    ``template_kwargs`` (the recipe's ``data.apply_chat_template_kwargs``, Qwen3's ``enable_thinking=False``): the
    template then re-renders earlier assistant turns differently from how they were generated (the empty thinking
    block of each generation prompt is dropped from history), so a re-render is no longer the token stream the agent
    loop builds; the response side is measured as that stream instead (:func:`_stream_lengths`)."""
    from env_wrappers.bfcl.environment.env import BFCLEnv
    from env_wrappers.protocol import CLOSING_TEXT
    from env_wrappers.bfcl.environment.scripted import reference_turns as _gt_messages
    from env_wrappers.bfcl.environment import prompts
    from env_wrappers.protocol import tool_messages

    if template_kwargs:
        return _stream_lengths(tok, task, fmt, template_kwargs)
    _fmt = fmt
    env = BFCLEnv(task, call_format=fmt, call_timeout_s=None)
    messages, tools = prompts.initial_messages(task, env.reset(), _fmt)

    def render(msgs, gen):
        return tok.apply_chat_template(msgs, tools=tools, add_generation_prompt=gen, tokenize=False)

    def n_tokens(text):
        return len(tok.encode(text, add_special_tokens=False))

    prompt_text = render(messages, True)
    n_prompt = n_tokens(prompt_text)
    plan = _gt_messages(task, fmt)
    llm = max_turn = max_obs = 0
    turn_llm = 0
    while not env.done:
        k = env.turn
        for text in list(plan[k] if k < len(plan) else []) + [CLOSING_TEXT]:
            n_text = n_tokens(text) + 1  # + the end-of-turn token
            llm += n_text
            turn_llm += n_text
            messages.append({"role": "assistant", "content": text})
            result = env.step(text)
            if result.tool_results and not result.turn_done:
                new = tool_messages(result.tool_results)
            elif result.turn_done and not result.episode_done:
                new = prompts.reveal_messages(task, env.turn, list(result.next_user or []),
                                            list(result.revealed_tools or []), _fmt)
            else:
                new = []
            before = render(messages, False)
            if new:
                messages.extend(new)
                after = render(messages, False)
                max_obs = max(max_obs, n_tokens(after[len(before):]))
            if env.done or env.turn != k:
                break
        max_turn = max(max_turn, turn_llm)
        turn_llm = 0
    total = n_tokens(render(messages, False))
    return {"prompt": n_prompt, "response": total - n_prompt, "llm": llm, "max_turn_llm": max_turn,
            "max_obs": max_obs, "total": total}


#: what verl's Continuous Token builder renders appended messages after (its synthetic prefix): a system and a user
#: message, and for tool results an assistant turn with reasoning and one call per result
_SYNTH_SYSTEM = {"role": "system", "content": "continuous token synthetic system"}
_SYNTH_USER = {"role": "user", "content": "continuous token synthetic user"}


def _stream_lengths(tok, task, fmt: str, template_kwargs: dict) -> dict:
    """The counts of :func:`task_lengths` on the token stream the agent loop builds with verl's Qwen Continuous
    Token builder: the first prompt, then per step the model's text and its end token, then per observation the
    newline after that end token and the observation's tokens rendered after the builder's synthetic prefix, with
    the next generation prompt (in non-thinking mode it carries the empty thinking block every time)."""
    from env_wrappers.bfcl.environment.env import BFCLEnv
    from env_wrappers.bfcl.environment import prompts
    from env_wrappers.bfcl.environment.scripted import reference_turns as _gt_messages
    from env_wrappers.protocol import CLOSING_TEXT, tool_messages

    env = BFCLEnv(task, call_format=fmt, call_timeout_s=None)
    messages, tools = prompts.initial_messages(task, env.reset(), fmt)

    def ids(msgs, gen):
        return tok.encode(tok.apply_chat_template(msgs, tools=tools, add_generation_prompt=gen, tokenize=False,
                                                  **template_kwargs), add_special_tokens=False)

    def delta(prefix, appended):
        before, after = ids(prefix, False), ids(prefix + appended, True)
        assert after[:len(before)] == before, "the template is not append-only after the synthetic prefix"
        return len(after) - len(before) + 1  # + the newline the builder inserts after the model's end token

    n_prompt = len(ids(messages, True))
    plan = _gt_messages(task, fmt)
    llm = max_turn = max_obs = response = 0
    turn_llm = 0
    while not env.done:
        k = env.turn
        for text in list(plan[k] if k < len(plan) else []) + [CLOSING_TEXT]:
            n_text = len(tok.encode(text, add_special_tokens=False)) + 1  # + the end-of-turn token
            llm += n_text
            turn_llm += n_text
            response += n_text
            result = env.step(text)
            if result.tool_results and not result.turn_done:
                new = tool_messages(result.tool_results)
                calls = [{"type": "function", "function": {"name": m["name"], "arguments": {}}} for m in new]
                synth = {"role": "assistant", "content": "", "reasoning_content": "reasoning", "tool_calls": calls}
                n_obs = delta([_SYNTH_SYSTEM, _SYNTH_USER, synth], new)
            elif result.turn_done and not result.episode_done:
                new = prompts.reveal_messages(task, env.turn, list(result.next_user or []),
                                              list(result.revealed_tools or []), fmt)
                n_obs = sum(delta([_SYNTH_SYSTEM, _SYNTH_USER], [m]) for m in new)
            else:
                n_obs = 0
            response += n_obs
            max_obs = max(max_obs, n_obs)
            if env.done or env.turn != k:
                break
        max_turn = max(max_turn, turn_llm)
        turn_llm = 0
    return {"prompt": n_prompt, "response": response, "llm": llm, "max_turn_llm": max_turn, "max_obs": max_obs,
            "total": n_prompt + response}


def measure(backbone: str, tokenizer_dir: Optional[str] = None, task_ids: Optional[list] = None) -> dict:
    """``{task_id: lengths}`` for all 800 tasks (or ``task_ids``)."""
    from env_wrappers.bfcl.environment.tasks import load_tasks

    from seal_verl.models.backbones import build_tokenizer, spec

    s = spec(backbone)
    if tokenizer_dir:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    else:
        tok = build_tokenizer(s.name)
    tasks = load_tasks(task_ids)
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover
        def tqdm(x, **_):
            return x
    return {tid: task_lengths(tok, t, s.call_format, s.chat_template_kwargs)
            for tid, t in tqdm(tasks.items(), desc=f"{s.name} lengths")}


def summary(lengths: dict) -> dict:
    """Per category: max and median of each count."""
    from env_wrappers.bfcl.environment.tasks import CATEGORIES, category_of

    out = {}
    for cat in list(CATEGORIES) + ["all"]:
        rows = [v for k, v in lengths.items() if cat == "all" or category_of(k) == cat]
        if rows:
            out[cat] = {key: {"max": max(r[key] for r in rows), "p50": int(statistics.median(r[key] for r in rows))}
                        for key in rows[0]}
    return out


def markdown(backbone: str, summ: dict) -> str:
    head = ("| backbone | category | first prompt p50 / max | GT response side p50 / max | GT model tokens max | "
            "model tokens in one turn max | one observation max | prompt + response max |")
    lines = [head, "|" + "---|" * 8]
    for cat, v in summ.items():
        lines.append(f"| {backbone} | {cat.replace('multi_turn_', '')} | {v['prompt']['p50']} / {v['prompt']['max']} | "
                     f"{v['response']['p50']} / {v['response']['max']} | {v['llm']['max']} | "
                     f"{v['max_turn_llm']['max']} | {v['max_obs']['max']} | {v['total']['max']} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m env_wrappers.bfcl.environment.lengths",
                                description=__doc__.split("\n")[0])
    p.add_argument("--backbone", required=True, help="qwen2.5 | qwen3 | toolace2 (or a recipe group name)")
    p.add_argument("--tokenizer", default=None, help="a saved tokenizer folder (default: build it now)")
    p.add_argument("--json", default=None, help="also write the per-task counts here")
    args = p.parse_args(argv)
    lengths = measure(args.backbone, args.tokenizer)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(lengths, f, indent=1)
    print(markdown(args.backbone, summary(lengths)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
