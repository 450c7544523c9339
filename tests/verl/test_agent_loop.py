"""The BFCL agent loops (``seal_bfcl`` / ``bfcl``) through verl 0.9.1's real code paths, on CPU.

verl's real ``AgentLoopWorker`` runs in this process (and, in the slow test, as a Ray actor) with a scripted
LLM client in place of the GPU server: it returns token ids of scripted text (ground-truth calls with injected
failures) encoded by a tiny random Qwen2 tokenizer made here. Rows come from ``prepare-data``'s row builder
through verl's ``RLHFDataset``; rewards through verl's real reward loop (``RewardLoopWorker`` +
``NaiveRewardManager``) and the project's reward function.
"""

from __future__ import annotations

import asyncio
import json
import time

import numpy as np
import pytest

from seal_verl import dry_run as D

#: How long an actor call of these tests may take: a hang, not speed, is what it catches. Two rollouts take seconds on
#: a quiet machine; with every core busy (load 8 on 2 cores, ``make test-under-load``) the worker's start-up and
#: rollouts once took over 120 s, so the bound is five times that.
RAY_CALL_S = 600

CHAT_TEMPLATE_LLAMA_STYLE = (
    # Written for this test: a Llama-3.1-like layout (role headers, tool results under an `ipython` header,
    # an exception for an assistant message with more than one tool call), on the tiny tokenizer's tokens.
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'assistant' and message.get('tool_calls') and message['tool_calls'] | length != 1 -%}"
    "{{- raise_exception('only single tool-calls at once') -}}"
    "{%- endif -%}"
    "{%- if message['role'] in ('tool', 'ipython') -%}"
    "{{- '<|im_start|>ipython\\n' + message['content'] + '<|im_end|>\\n' -}}"
    "{%- elif message['role'] == 'assistant' and message.get('tool_calls') -%}"
    "{{- '<|im_start|>assistant\\n' + (message['content'] or '') + '<|im_end|>\\n' -}}"
    "{%- else -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + (message['content'] or '') + '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return D.tiny_model(str(tmp_path_factory.mktemp("tiny") / "model"))


@pytest.fixture(scope="module")
def books():
    return {"json": D.PlanBook("json"), "python": D.PlanBook("python")}


def _state(all_on: bool):
    """A closed-loop state with every cue kind on (or off)."""
    from seal_verl.core.interface import CUE_KINDS, InterfaceConfig
    from seal_verl.core.loop import ClosedLoopState, SealSwitches
    from seal_verl.core.weighting import WeightingConfig

    st = ClosedLoopState.initial(SealSwitches(), InterfaceConfig(), WeightingConfig())
    st.interface.active = {k: all_on for k in CUE_KINDS}
    return st


class Harness:
    """verl's AgentLoopWorker in this process, with a scripted LLM, the real reward loop and dataset."""

    def __init__(self, model, tmp_path, tasks, fmt="json", loop_kwargs=None, response_length=8192, overrides=None,
                 seal=None, rollouts=1, chat_template=None, source=None):
        from omegaconf import open_dict
        from transformers import AutoTokenizer

        self.loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self.loop)
        self.tmp = tmp_path
        self.fmt = fmt
        yaml_path = D.write_agent_loop_yaml(str(tmp_path / f"loops_{fmt}.yaml"), fmt, **(loop_kwargs or {}))
        self.config = D.verl_config(model, agent_loop_yaml=yaml_path, rollouts=rollouts,
                                    response_length=response_length, overrides=overrides, seal=seal)
        if chat_template is not None:
            with open_dict(self.config):
                self.config.actor_rollout_ref.model.custom_chat_template = chat_template
        self.tok = AutoTokenizer.from_pretrained(model)
        self.llm = D.ScriptedLLM(self.tok, tasks)
        self.worker = D.make_worker(self.config, self.llm, state_source=None if source is None else source.read)
        self.n = 0

    def run(self, jobs, agent_name="seal_bfcl", split="train"):
        """``jobs``: list of (task_id, plan); one row per job. Returns the worker's output DataProto."""
        self.llm.reset()
        for tid, plan in jobs:
            self.llm.queue(tid, [plan])
        self.n += 1
        path = str(self.tmp / f"rows_{self.n}.parquet")
        D.write_parquet(D.dataset_rows([t for t, _ in jobs], agent_name, split, self.fmt), path)
        batch = D.load_batch(path, self.config, self.tok, 1, uid_prefix=f"r{self.n}-")
        return self.loop.run_until_complete(self.worker.generate_sequences(batch))

    def close(self):
        self.loop.close()
        asyncio.set_event_loop(None)


class StateSource:
    """The closed-loop state a test's in-process training loops read (``make_worker(state_source=...)``): set by
    calling it, read at the start of every rollout."""

    def __init__(self):
        self.state = None

    def __call__(self, state):
        self.state = state

    def read(self, step):
        return self.state


@pytest.fixture
def state_source():
    return StateSource()


def _valid_response(out, i):
    n = out.batch["prompts"].shape[1]
    valid = out.batch["attention_mask"][i, n:].bool()
    return out.batch["responses"][i][valid].tolist(), out.batch["response_mask"][i][valid].tolist()


def _segments(ids, mask, value):
    """Maximal runs of ``ids`` whose mask equals ``value``."""
    runs, cur = [], []
    for t, m in zip(ids, mask):
        if m == value:
            cur.append(t)
        elif cur:
            runs.append(cur)
            cur = []
    if cur:
        runs.append(cur)
    return runs


# ----------------------------------------------------------------------------------------------------- tests


def test_plugin_registers_both_loops():
    import verl  # noqa: F401 - runs the verl.plugins entry point
    from verl.experimental.agent_loop.agent_loop import _agent_loop_registry

    from seal_verl.verl_glue import plugin

    assert plugin.REGISTERED.get("agent_loops") is True
    assert _agent_loop_registry["seal_bfcl"]["_target_"] == "seal_verl.verl_glue.agent_loop.SealBFCLAgentLoop"
    assert _agent_loop_registry["bfcl"]["_target_"] == "seal_verl.verl_glue.agent_loop.BFCLAgentLoop"


@pytest.mark.parametrize("fmt", ["json", "python"])
def test_training_loop_trace_reward_and_masks(tiny, tasks, books, tmp_path, state_source, fmt):
    """Scripted behaviour in, the same behaviour in the trace, graded right, masks exactly on the model's tokens."""
    from seal_verl.core.observation import HINT_PREFIX

    import reward_fns.bfcl_reward as reward_mod
    book = books[fmt]
    jobs = []
    for tid, targets in (("multi_turn_base_0", ["pass", "invalid_tool_call", "argument_mismatch", "recovery_failure"]),
                         ("multi_turn_miss_func_0", ["spurious_tool_call", "missing_tool_call"]),
                         ("multi_turn_miss_param_0", ["pass", "state_mismatch"])):
        for t in targets:
            plan = book.get(tasks[tid], t)
            assert plan is not None, (tid, t)
            jobs.append((tid, plan))
    state_source(_state(all_on=True))
    h = Harness(tiny, tmp_path, tasks, source=state_source, fmt=fmt)
    try:
        out = h.run(jobs)
    finally:
        h.close()
    nt = out.non_tensor_batch
    assert len(out) == len(jobs)
    seen_targets = []
    for i, (tid, _) in enumerate(jobs):
        trace = json.loads(nt["seal_trace"][i])
        assert trace["task_id"] == tid == nt["task_id"][i]
        assert nt["seal_agent_loop"][i] == "seal_bfcl"
        # rows of one task take their plans in whatever order their first generate calls arrive
        rec = h.llm.record_for(trace)
        assert rec is not None, "the trace's attempts are not the messages the scripted LLM sent"
        plan = rec["plan"]
        # labels from the reward function (verl's reward loop) = the plan's offline replay
        labels = json.loads(nt["seal_labels"][i])
        assert labels == plan.labels, (tid, plan.target, labels)
        seen_targets.append((tid, plan.target))
        passing = all(lab == "pass" for lab in labels)
        assert float(nt["score"][i]) == (1.0 if passing else 0.0)
        assert float(out.batch["rm_scores"][i].sum()) == float(nt["score"][i])
        # the reward function, called directly on the same extra_info, agrees
        direct = reward_mod.compute_score(data_source=tasks[tid].category, solution_str="", ground_truth=None,
                                          extra_info={"seal_trace": nt["seal_trace"][i], "task_id": tid})
        assert direct["seal_labels"] == nt["seal_labels"][i] and direct["score"] == float(nt["score"][i])
        # masks: the mask-1 runs are exactly the scripted token ids, in order; nothing else has mask 1
        ids, mask = _valid_response(out, i)
        assert _segments(ids, mask, 1) == rec["ids"]
        prompt, model_text, obs_text = D.rollout_texts(out, h.tok, i)
        assert HINT_PREFIX.strip() not in model_text
        assert HINT_PREFIX.strip() in prompt, "cues are on: the first user message carries start-of-task cues"
        # every executed call's result, and every later user turn, is in the observation (mask-0) tokens
        for turn in trace["turns"]:
            for a in turn["attempts"]:
                for c in a["calls"]:
                    if c["executed"] and c["result"]:
                        assert c["result"][:60] in obs_text
        for k in range(1, len(tasks[tid].questions)):
            for m in tasks[tid].questions[k]:
                assert m["content"][:60] in obs_text
        assert int(nt["seal_cue_tokens"][i]) > 0
        assert trace["meta"]["cues"]["tokens"] == int(nt["seal_cue_tokens"][i])
        assert trace["meta"]["interface_active"]
        # the system prompt tells the tools offered at the start (held-out miss_func docs come later)
        for doc in tasks[tid].functions:
            assert f'"name": "{doc["name"]}"' in prompt
        if fmt == "json":
            assert "<tools>" in prompt
        else:
            assert "You are an expert in composing functions" in prompt
    assert sorted(seen_targets) == sorted((tid, p.target) for tid, p in jobs)


def test_reveal_docs_go_into_the_reveal_message(tiny, tasks, books, tmp_path, state_source):
    """miss_func: the revealed tool docs are appended to the reveal user message (never re-rendered tools)."""
    from env_wrappers.bfcl.environment.env import REVEAL_MESSAGE

    task = tasks["multi_turn_miss_func_0"]
    state_source(_state(all_on=False))
    h = Harness(tiny, tmp_path, tasks, source=state_source)
    try:
        out = h.run([(task.id, books["json"].get(task, "pass"))], agent_name="bfcl", split="eval")
    finally:
        h.close()
    prompt, _, obs = D.rollout_texts(out, h.tok, 0)
    (turn,) = list(task.missed_functions)
    names = [d["name"] for d in task.missed_functions[turn]]
    assert all(f'"name": "{n}"' not in prompt for n in names), "held-out docs must not be in the system prompt"
    reveal_at = obs.index(REVEAL_MESSAGE)
    user_start = obs.rindex("<|im_start|>user\n", 0, reveal_at)
    # bfcl-eval's reveal text: the raw doc list (Python repr), a newline, its reveal sentence
    assert obs[user_start:reveal_at].endswith(str(task.missed_functions[turn]) + "\n")
    for n in names:
        assert f"'name': '{n}'" in obs[user_start:reveal_at]
    assert json.loads(out.non_tensor_batch["seal_labels"][0]) == ["pass"] * task.n_turns


def test_tool_steps_run_in_the_sandbox_threads_and_the_episode_lets_go_at_its_end(tiny, tasks, books, tmp_path,
                                                                                  state_source, monkeypatch):
    """Through verl's AgentLoopWorker: every tool step runs in the sandbox's own threads (not in the event
    loop's default executor, which verl's own work uses), and when a rollout ends its episode has given its
    worker and its slot back (nothing waits for the environment to be collected)."""
    import threading

    from env_wrappers.bfcl.environment.env import BFCLEnv
    from env_wrappers.bfcl.sandbox import client as sandbox_client
    from env_wrappers.bfcl.sandbox import pool as sandbox_pool

    names = []
    step = BFCLEnv.step

    def recording(self, message):
        names.append(threading.current_thread().name)
        return step(self, message)

    state_source(_state(all_on=False))
    task = tasks["multi_turn_base_0"]
    plan = books["json"].get(task, "pass")  # planned (by playing the task) before the steps are recorded
    h = Harness(tiny, tmp_path, tasks, source=state_source)
    monkeypatch.setattr(BFCLEnv, "step", recording)
    try:
        out = h.run([(task.id, plan), (task.id, plan)])
    finally:
        h.close()
    assert json.loads(out.non_tensor_batch["seal_labels"][0]) == ["pass"] * task.n_turns
    assert names and all(n.startswith("seal-bfcl-tool") for n in names), sorted(set(names))
    assert sandbox_client.TOOL_THREAD_NAME == "seal-bfcl-tool"
    stats = sandbox_pool.pool().stats()
    assert stats["leased"] == 0 and stats["slots"] == 0, stats


def test_eval_loop_never_adds_cues(tiny, tasks, books, tmp_path, state_source):
    """``bfcl`` renders byte-identical tokens whatever the state says; ``seal_bfcl`` adds cues only when on."""
    from seal_verl.core.observation import HINT_PREFIX

    book = books["json"]
    jobs = [("multi_turn_base_0", book.get(tasks["multi_turn_base_0"], "invalid_tool_call")),
            ("multi_turn_miss_param_0", book.get(tasks["multi_turn_miss_param_0"], "spurious_tool_call"))]
    assert all(p is not None for _, p in jobs)
    h = Harness(tiny, tmp_path, tasks, source=state_source)
    outs = {}
    try:
        for loop_name in ("bfcl", "seal_bfcl"):
            for on in (True, False):
                state_source(_state(all_on=on))
                outs[(loop_name, on)] = h.run(jobs, agent_name=loop_name, split="eval")
    finally:
        h.close()

    def tokens(out, i):
        return D.rollout_texts(out, h.tok, i), _valid_response(out, i)

    marker = HINT_PREFIX.strip()
    for i in range(len(jobs)):
        eval_on, eval_off = tokens(outs[("bfcl", True)], i), tokens(outs[("bfcl", False)], i)
        assert eval_on == eval_off
        assert outs[("bfcl", True)].batch["prompts"][i].tolist() == outs[("bfcl", False)].batch["prompts"][i].tolist()
        assert all(marker not in text for text in eval_on[0])
        assert int(outs[("bfcl", True)].non_tensor_batch["seal_cue_tokens"][i]) == 0
        # the training loop with every kind off is the evaluation loop, byte for byte
        assert tokens(outs[("seal_bfcl", False)], i) == eval_off
        # ... and with the kinds on it carries cue text, only in observation tokens
        (prompt, model, obs), _ = tokens(outs[("seal_bfcl", True)], i)
        assert marker in prompt and marker in obs and marker not in model
        assert int(outs[("seal_bfcl", True)].non_tensor_batch["seal_cue_tokens"][i]) > 0
        labels = [json.loads(outs[k].non_tensor_batch["seal_labels"][i]) for k in outs]
        assert all(lab == labels[0] for lab in labels), "cues never change what the tools do"


def test_token_budgets(tiny, tasks, books, tmp_path, state_source):
    """Per-turn and per-step LLM budgets, the trajectory budget (rollout.response_length) and the cue budget."""
    import reward_fns.bfcl_reward as reward_mod
    task = tasks["multi_turn_base_0"]
    plan = books["json"].get(task, "pass")
    state_source(_state(all_on=True))

    # 1. a per-turn LLM budget that cuts the first message of turn 0 inside its second <tool_call> block: the
    #    first call runs, the cut block is dropped, and the turn is then ended by the budget. Per message the
    #    same cap; cue budget 200 tokens.
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny)
    first_block = plan.messages[0][0].split("</tool_call>")[0] + "</tool_call>\n"
    budget = len(tok.encode(first_block, add_special_tokens=False)) + 3
    assert budget < len(tok.encode(plan.messages[0][0], add_special_tokens=False))
    h = Harness(tiny, tmp_path, tasks, source=state_source, loop_kwargs={"max_tokens_per_turn": budget, "max_tokens_per_step": budget,
                                                    "max_cue_tokens": 200})
    try:
        out = h.run([(task.id, plan)])
    finally:
        h.close()
    (rec,) = h.llm.records
    per_turn: dict[int, int] = {}
    for turn, ids, limit in zip(rec["turns"], rec["ids"], rec["max_tokens"]):
        assert len(ids) <= limit <= budget
        per_turn[turn] = per_turn.get(turn, 0) + len(ids)
    assert per_turn and max(per_turn.values()) <= budget
    trace = json.loads(out.non_tensor_batch["seal_trace"][0])
    assert len(trace["turns"]) == task.n_turns
    assert any(t["ended_by"] == "token_budget" for t in trace["turns"])
    assert any(e["event"] == "turn_budget" for e in trace["meta"]["budget_events"])
    ids, mask = _valid_response(out, 0)
    assert sum(mask) == sum(len(x) for x in rec["ids"])
    cue_tokens = int(out.non_tensor_batch["seal_cue_tokens"][0])
    assert cue_tokens <= 200
    assert trace["meta"]["cues"]["suppressed_by_token_budget"] >= 1
    rendered = "".join(D.rollout_texts(out, h.tok, 0))
    assert rendered.count("[hint]") == trace["meta"]["cues"]["count_rendered"]

    # 2. the whole trajectory: rollout.response_length = 600 tokens (model + observations)
    h = Harness(tiny, tmp_path, tasks, source=state_source, response_length=600)
    try:
        out = h.run([(task.id, plan)])
    finally:
        h.close()
    ids, mask = _valid_response(out, 0)
    assert len(ids) <= 600
    trace = json.loads(out.non_tensor_batch["seal_trace"][0])
    assert len(trace["turns"]) == task.n_turns
    assert trace["meta"].get("terminated_by") == "token_budget"
    (rec,) = h.llm.records
    assert all(limit <= 600 for limit in rec["max_tokens"])
    assert float(out.non_tensor_batch["score"][0]) == 0.0  # ran out of budget: the later turns are empty
    assert json.loads(out.non_tensor_batch["seal_labels"][0])[-1] == "missing_tool_call"
    direct = reward_mod.compute_score(extra_info={"seal_trace": out.non_tensor_batch["seal_trace"][0], "task_id": task.id})
    assert direct["score"] == 0.0


def test_python_format_with_llama_style_template(tiny, tasks, books, tmp_path, state_source):
    """BFCL's prompt mode (Python call list) with tool results in an ``ipython`` turn, on a template that, like
    Llama 3.1's, rejects assistant messages with several tool calls (steps here execute up to four calls)."""
    task = tasks["multi_turn_base_0"]
    book = books["python"]
    jobs = [(task.id, book.get(task, "pass")), (task.id, book.get(task, "argument_mismatch"))]
    state_source(_state(all_on=True))
    h = Harness(tiny, tmp_path, tasks, source=state_source, fmt="python", loop_kwargs={"tool_role": "ipython"},
                chat_template=CHAT_TEMPLATE_LLAMA_STYLE)
    try:
        out = h.run(jobs)
    finally:
        h.close()
    for i in range(len(jobs)):
        plan = h.llm.record_for(json.loads(out.non_tensor_batch["seal_trace"][i]))["plan"]
        assert json.loads(out.non_tensor_batch["seal_labels"][i]) == plan.labels
        prompt, model, obs = D.rollout_texts(out, h.tok, i)
        assert prompt.startswith("<|im_start|>system\nYou are an expert in composing functions")
        assert obs.count("<|im_start|>ipython\n") >= 4  # one ipython turn per executed call
        assert all(m in model for turn in plan.messages for m in turn)


def test_a_step_parses_the_closed_loop_state_once(tiny, tasks, books, tmp_path, state_source, monkeypatch):
    """Every rollout of a step reads the cue state through one parsed view: the state is checked and parsed once
    for the step's rollouts, not once per rollout."""
    from seal_verl.core.loop import ClosedLoopState

    parsed = []
    real = ClosedLoopState.from_dict.__func__

    def counting(cls, d):
        parsed.append(1)
        return real(cls, d)

    task = tasks["multi_turn_base_0"]
    plan = books["json"].get(task, "pass")
    state_source(_state(all_on=True))
    h = Harness(tiny, tmp_path, tasks, source=state_source)
    monkeypatch.setattr(ClosedLoopState, "from_dict", classmethod(counting))
    try:
        out = h.run([(task.id, plan)] * 4)
    finally:
        h.close()
    assert len(out) == 4 and all(int(c) > 0 for c in out.non_tensor_batch["seal_cue_tokens"])
    assert len(parsed) == 1


def test_missing_task_id_is_a_clear_error(tiny, tasks, tmp_path, state_source):
    h = Harness(tiny, tmp_path, tasks, source=state_source)
    try:
        rows = D.dataset_rows(["multi_turn_base_0"], "bfcl", "eval")
        del rows[0]["extra_info"]["task_id"]
        path = str(tmp_path / "bad.parquet")
        D.write_parquet(rows, path)
        batch = D.load_batch(path, h.config, h.tok, 1)
        with pytest.raises(ValueError, match="extra_info.task_id"):
            h.loop.run_until_complete(h.worker.generate_sequences(batch))
    finally:
        h.close()


def test_call_format_mismatch_between_data_and_loop_is_an_error(tiny, tasks, tmp_path, state_source):
    h = Harness(tiny, tmp_path, tasks, source=state_source, fmt="json")
    try:
        path = str(tmp_path / "py.parquet")
        D.write_parquet(D.dataset_rows(["multi_turn_base_0"], "bfcl", "eval", "python"), path)
        batch = D.load_batch(path, h.config, h.tok, 1)
        with pytest.raises(ValueError, match="call_format"):
            h.loop.run_until_complete(h.worker.generate_sequences(batch))
    finally:
        h.close()


@pytest.fixture(scope="module")
def ray_env(tiny, tmp_path_factory):
    """One local Ray cluster (16 logical CPUs, as TransferQueue needs) with TransferQueue, verl's real
    RewardLoopWorker as an actor, and the SEAL state actor's publisher; shared by the Ray tests."""
    import os

    ray = pytest.importorskip("ray")
    tq = pytest.importorskip("transfer_queue")
    from omegaconf import OmegaConf
    from transformers import AutoTokenizer
    from verl.experimental.reward_loop.reward_loop import RewardLoopWorker

    import verl
    from seal_verl.verl_glue import state_actor

    tmp = tmp_path_factory.mktemp("ray")
    yaml_path = D.write_agent_loop_yaml(str(tmp / "loops.yaml"), "json")
    config = D.verl_config(tiny, agent_loop_yaml=yaml_path, rollouts=2)
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=16, include_dashboard=False, log_to_driver=False)
    tq_cfg = OmegaConf.load(os.path.join(os.path.dirname(verl.__file__), "trainer", "config", "transfer_queue",
                                         "transfer_queue.yaml"))
    tq_cfg.backend.SimpleStorage.num_data_storage_units = 1
    tq_cfg.backend.SimpleStorage.total_storage_size = 100
    tq.init(tq_cfg)
    name, namespace, _ = state_actor.actor_coordinates(config)
    env = {
        "ray": ray, "tq": tq, "config": config, "tmp": tmp, "tok": AutoTokenizer.from_pretrained(tiny),
        "reward": ray.remote(RewardLoopWorker).remote(config, None),
        # the publisher holds the named actor alive, as the trainer's driver does
        "publisher": state_actor.StatePublisher(name, namespace=namespace),
    }
    try:
        yield env
    finally:
        tq.close()
        state_actor.kill_state_actor(name, namespace)
        if started:
            ray.shutdown()


def _publish(env, step, kinds):
    from seal_verl.verl_glue import state_actor

    st = _state(all_on=False)
    for k in kinds:
        st.interface.active[k] = True
    env["publisher"].publish({"format": state_actor.PAYLOAD_FORMAT, "global_step": step, "run_id": "test",
                              "switches": {"env_side": True, "reweighting": True, "closed_loop": True},
                              "state": st.to_dict()})


@pytest.mark.slow
def test_through_ray_actors_with_published_state(tasks, books, ray_env):
    """Real Ray actors: verl's AgentLoopWorker and RewardLoopWorker as actors (the plugin registers the loops in
    the worker process), the training loop reading Omega_t from the SEAL state actor the trainer publishes to."""
    from seal_verl.core.observation import HINT_PREFIX
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker

    ray, config, tok, tmp = ray_env["ray"], ray_env["config"], ray_env["tok"], ray_env["tmp"]
    book = books["json"]
    jobs = [("multi_turn_base_0", book.get(tasks["multi_turn_base_0"], "invalid_tool_call")),
            ("multi_turn_miss_param_0", book.get(tasks["multi_turn_miss_param_0"], "pass"))]
    llm = D.ScriptedLLM(tok, {t: tasks[t] for t, _ in jobs})  # pickled into the actor: queue both passes now
    for tid, plan in jobs:
        llm.queue(tid, [plan, plan])
    _publish(ray_env, 3, ["call_format", "schema_constraints"])
    worker = ray.remote(AgentLoopWorker).remote(config, llm, None, [ray_env["reward"]])
    outs = {}
    for loop_name, split in (("seal_bfcl", "train"), ("bfcl", "eval")):
        path = str(tmp / f"{loop_name}.parquet")
        D.write_parquet(D.dataset_rows([t for t, _ in jobs], loop_name, split), path)
        batch = D.load_batch(path, config, tok, 1)
        if loop_name == "seal_bfcl":  # as the V1 trainer does: the loop then reads through the cached client
            batch.non_tensor_batch["global_steps"] = np.array([3] * len(batch), dtype=object)
        outs[loop_name] = ray.get(worker.generate_sequences.remote(batch), timeout=RAY_CALL_S)
    ray.kill(worker)
    marker = HINT_PREFIX.strip()
    for loop_name, out in outs.items():
        for i, (tid, plan) in enumerate(jobs):
            assert json.loads(out.non_tensor_batch["seal_labels"][i]) == plan.labels
            trace = json.loads(out.non_tensor_batch["seal_trace"][i])
            texts = D.rollout_texts(out, tok, i)
            if loop_name == "seal_bfcl":
                assert trace["meta"]["interface_source"] == "published"
                assert trace["meta"]["interface_global_step"] == 3
                assert trace["meta"]["interface_active"] == ["call_format", "schema_constraints"]
                assert marker in texts[0]
            else:
                assert "interface_source" not in trace["meta"]
                assert all(marker not in t for t in texts)


@pytest.mark.slow
def test_v1_transfer_queue_worker_stores_trace_and_reward_extras(tasks, books, ray_env):
    """verl's V1 path: ``AgentLoopWorkerTQ`` (a Ray actor) runs the loops on a dataloader-style TensorDict with
    ``global_steps`` and writes each trajectory to TransferQueue; the reward function's extras (from the trace
    in ``extra_fields``) land in ``extra_fields["reward_extra_info"]``, where the SEAL V1 trainer reads them."""
    from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopWorkerTQ
    from verl.utils import tensordict_utils as tu
    from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn

    from seal_verl.core.extras import decode

    ray, tq, config, tok, tmp = (ray_env[k] for k in ("ray", "tq", "config", "tok", "tmp"))
    book = books["json"]
    task = tasks["multi_turn_base_0"]
    plans = [book.get(task, "pass"), book.get(task, "missing_tool_call")]
    assert config.actor_rollout_ref.rollout.n == len(plans)
    llm = D.ScriptedLLM(tok, {task.id: task})
    llm.queue(task.id, plans)
    path = str(tmp / "v1.parquet")
    D.write_parquet(D.dataset_rows([task.id], "seal_bfcl", "train"), path)
    ds = RLHFDataset(data_files=[path], tokenizer=tok, config=config.data, processor=None)
    batch_dict = collate_fn([ds[0]])
    uid = "v1-prompt-0"
    batch_dict["uid"] = np.array([uid], dtype=object)
    batch = tu.get_tensordict(batch_dict)
    tu.assign_non_tensor_data(batch, "global_steps", 5)

    _publish(ray_env, 4, ["tool_affordance"])
    worker = AgentLoopWorkerTQ.remote(config, llm, None, [ray_env["reward"]])
    tq.kv_batch_put(keys=[uid], partition_id="train", tags=[{"is_prompt": True, "status": "pending",
                                                               "global_steps": 5}])
    ray.get(worker.generate_sequences.remote(batch), timeout=RAY_CALL_S)
    status, t0 = None, time.time()
    while time.time() - t0 < RAY_CALL_S:
        status = tq.kv_list("train").get("train", {}).get(uid, {}).get("status")
        if status in ("finished", "failure"):
            break
        time.sleep(0.5)
    assert status == "finished"
    keys = [f"{uid}_{s}_0" for s in range(len(plans))]
    data = tq.kv_batch_get(keys=keys, partition_id="train", select_fields=["extra_fields", "rm_scores", "uid"])
    extra_fields = [getattr(ef, "data", ef) for ef in list(data["extra_fields"])]
    scores = data["rm_scores"].to_padded_tensor(padding=0.0).sum(-1).tolist()
    ray.kill(worker)
    got = []
    for i, ef in enumerate(extra_fields):
        trace = json.loads(ef["seal_trace"])
        info = ef["reward_extra_info"]
        assert trace["task_id"] == ef["task_id"] == task.id
        assert trace["meta"]["interface_global_step"] == 4 and trace["meta"]["interface_active"] == ["tool_affordance"]
        record = decode(info, i).record  # what the SEAL V1 trainer builds from TransferQueue
        got.append(record.labels)
        assert scores[i] == record.reward
    assert sorted(got) == sorted(p.labels for p in plans)
