"""reward_fns/bfcl_reward.py: grading from real rollout traces, options, errors, and verl's own loading path."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
from _paths import REPO
from _play import play

from env_wrappers.bfcl.environment import verifier as verifier_mod
from env_wrappers.bfcl.environment.env import BFCLEnv
from env_wrappers.bfcl.environment.examples import examples
from env_wrappers.bfcl.environment.perturb import ground_truth_steps, perturb, render_step
from seal_verl.core import taxonomy as tx
ROOT = Path(REPO)
REWARD_FILE = ROOT / "reward_fns" / "bfcl_reward.py"


def _load_module():
    spec = importlib.util.spec_from_file_location("bfcl_reward_under_test", REWARD_FILE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


R = _load_module()

EXPECTED_LABELS = {
    "pass": ["pass", "pass", "pass", "pass"],
    "invalid_tool_call": ["pass", "invalid_tool_call", "pass", "pass"],
    "argument_mismatch_schema": ["argument_mismatch", "pass", "pass", "pass"],
    "argument_mismatch_value": ["pass", "argument_mismatch", "pass", "pass"],
    "state_mismatch": ["state_mismatch", "pass", "pass", "pass"],
    "recovery_failure": ["pass", "recovery_failure", "pass", "pass"],
    "missing_tool_call": ["pass", "pass", "missing_tool_call", "pass"],
    "response_mismatch": ["pass", "response_mismatch", "pass", "pass"],
    "spurious_tool_call": ["pass", "pass", "spurious_tool_call", "pass", "pass"],
    "hidden_function_called": ["pass", "invalid_tool_call", "pass", "pass", "pass"],
}


def rollout(task, result, fmt):
    """Play a ``bfcl generate``-style result through BFCLEnv's live protocol; return the trace."""
    return play(task, result, fmt)


def extra(trace, **more):
    return {"index": 0, "task_id": trace.task_id, "split": "train", "call_format": "json",
            R.TRACE_KEY: trace.to_json(), **more}


@pytest.fixture(scope="module")
def samples(tasks):
    """{(fmt, example name): (task, trace)} for every labelled example in both text call formats."""
    out = {}
    for fmt in ("json", "python"):
        for name, (tid, result) in examples(fmt).items():
            out[(fmt, name)] = (tasks[tid], rollout(tasks[tid], result, fmt))
    return out


def score(task, trace, **kw):
    return R.compute_score(data_source=task.category, solution_str="ignored", ground_truth=json.dumps(task.ground_truth),
                           extra_info=extra(trace), **kw)


# ----------------------------------------------------------------------------------------------------------
# values
# ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["json", "python"])
@pytest.mark.parametrize("name", sorted(EXPECTED_LABELS))
def test_labels_scores_and_profile(samples, fmt, name):
    task, trace = samples[(fmt, name)]
    out = score(task, trace)
    labels = EXPECTED_LABELS[name]
    assert tuple(out) == R.RESULT_KEYS
    assert json.loads(out["seal_labels"]) == labels
    assert json.loads(out["seal_abstention"]) == task.abstention_turns()
    assert out["seal_task_id"] == task.id and out["seal_category"] == task.category
    assert out["seal_checker_error"] == 0.0
    official = name in ("pass", "spurious_tool_call")
    assert out["acc"] == float(official)
    assert out["score"] == float(name == "pass")  # strict abstention by default: spurious fails
    # the profile: shares of the labelled turns; a pass on an abstention turn is a correct abstention
    n = len(labels)
    for key in tx.PROFILE_KEYS:
        if key == tx.CORRECT_ABSTENTION:
            want = sum(l == "pass" and a for l, a in zip(labels, task.abstention_turns())) / n
        elif key == tx.PASS:
            want = sum(l == "pass" and not a for l, a in zip(labels, task.abstention_turns())) / n
        else:
            want = labels.count(key) / n
        assert out[R.PROFILE_PREFIX + key] == pytest.approx(want), key
    assert sum(out[R.PROFILE_PREFIX + k] for k in tx.PROFILE_KEYS) == pytest.approx(1.0)


def test_every_label_appears(samples, tasks, monkeypatch):
    seen = set()
    for task, trace in samples.values():
        seen |= set(json.loads(score(task, trace)["seal_labels"]))
    # a verifier failure is labelled checker_error and flagged
    real = verifier_mod._compare
    calls = {"n": 0}

    def flaky(model, gt):
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("simulated checker failure")
        return real(model, gt)

    monkeypatch.setattr(verifier_mod, "_compare", flaky)
    from env_wrappers.bfcl.sandbox import pool as sandbox_pool

    sandbox_pool.pool().shutdown()  # judgements run in forked workers: these are forked with the patch
    task, trace = samples[("json", "pass")]
    try:
        out = score(task, trace)
    finally:
        sandbox_pool.pool().shutdown()  # and none of them judges for a later test
    labels = json.loads(out["seal_labels"])
    seen |= set(labels)
    assert tx.CHECKER_ERROR in labels and out["seal_checker_error"] == 1.0
    assert out["score"] == 0.0 and out["acc"] == 0.0
    # checker errors are excluded from the profile: the other turns share it
    assert sum(out[R.PROFILE_PREFIX + k] for k in tx.PROFILE_KEYS) == pytest.approx(1.0)
    assert seen == set(tx.LABELS)


def test_key_set_identical_across_samples_and_stackable(samples):
    outs = [score(task, trace) for task, trace in samples.values()]
    keys = [tuple(o) for o in outs]
    assert len(set(keys)) == 1
    for k in keys[0]:
        col = np.array([o[k] for o in outs])  # what verl does with reward extras
        assert col.shape == (len(outs),), k
        assert all(isinstance(o[k], (float, str)) for o in outs)


def test_options_change_the_score_as_specified(samples):
    task, trace = samples[("json", "spurious_tool_call")]
    assert score(task, trace)["score"] == 0.0  # default: strict
    assert score(task, trace, strict_abstention=False)["score"] == 1.0  # official semantics
    assert score(task, trace, strict_abstention=True, dense_credit=True)["score"] == pytest.approx(4 / 5)
    assert score(task, trace, strict_abstention=False, dense_credit=True)["score"] == 1.0
    for _, name in [k for k in samples if k[0] == "json"]:
        t, tr_ = samples[("json", name)]
        off, on = score(t, tr_), score(t, tr_, dense_credit=True)
        assert off["acc"] == on["acc"] and off["seal_labels"] == on["seal_labels"]
        if name == "pass":
            assert on["score"] == 1.0
        elif name != "spurious_tool_call":  # one failing turn out of four checked ones (abstention skipped)
            checked = sum(not a for a in t.abstention_turns()) + sum(t.abstention_turns())
            assert on["score"] == pytest.approx((checked - 1) / checked), name
    # options may arrive as strings from a command line
    assert score(task, trace, strict_abstention="false")["score"] == 1.0


def test_dense_credit_on_perturbed_rollouts(tasks):
    task = tasks["multi_turn_base_10"]
    traj, k = perturb(task, "empty_turn", seed=0)
    result = [[render_step(task, s, "json") for s in steps] + ["Done."] for steps in traj]
    trace = rollout(task, result, "json")
    out = score(task, trace, dense_credit=True)
    labels = json.loads(out["seal_labels"])
    assert labels[k] == "missing_tool_call"
    checked = len(labels)  # no abstention turns in base tasks
    assert out["score"] == pytest.approx(labels.count("pass") / checked) and out["score"] < 1.0
    gt = [[render_step(task, s, "json") for s in steps] + ["Done."] for steps in ground_truth_steps(task)]
    assert score(task, rollout(task, gt, "json"), dense_credit=True)["score"] == 1.0


def test_force_terminated_rollout_fails_and_dense_never_full(tasks):
    task = tasks["multi_turn_base_0"]
    env = BFCLEnv(task, max_steps_per_turn=1)
    env.reset()
    step = render_step(task, list(task.ground_truth[0]), "json")
    env.step(step)
    env.step(step)  # over the cap: force-terminated
    assert env.trace.force_terminated
    out = score(task, env.trace, dense_credit=True)
    assert out["acc"] == 0.0 and out["score"] < 1.0


def test_grades_from_the_trace_not_the_solution_string(samples):
    task, trace = samples[("json", "pass")]
    a = R.compute_score(task.category, "garbage", None, extra(trace))
    b = R.compute_score(task.category, "<tool_call>anything</tool_call>", None, extra(trace))
    assert a == b and a["score"] == 1.0


def test_trace_as_dict_and_task_id_from_trace(samples):
    task, trace = samples[("json", "pass")]
    out = R.compute_score(task.category, "", None, {R.TRACE_KEY: trace.to_dict()})
    assert out["score"] == 1.0 and out["seal_task_id"] == task.id


# ----------------------------------------------------------------------------------------------------------
# errors are loud
# ----------------------------------------------------------------------------------------------------------


def test_missing_trace_is_an_error(samples):
    task, trace = samples[("json", "pass")]
    with pytest.raises(KeyError, match="seal_trace"):
        R.compute_score(task.category, "", None, {"task_id": task.id})
    with pytest.raises(ValueError, match="extra_info must be a dict"):
        R.compute_score(task.category, "", None, None)
    with pytest.raises(ValueError, match="not a valid trace"):
        R.compute_score(task.category, "", None, {R.TRACE_KEY: "{not json"})


def test_unknown_or_inconsistent_task_is_an_error(samples):
    task, trace = samples[("json", "pass")]
    d = trace.to_dict()
    d["task_id"] = "multi_turn_base_99999"
    with pytest.raises(KeyError, match="unknown BFCL V3 multi-turn task id"):
        R.compute_score(task.category, "", None, {R.TRACE_KEY: json.dumps(d)})
    with pytest.raises(ValueError, match="differs from the trace"):
        R.compute_score(task.category, "", None, extra(trace, task_id="multi_turn_base_1"))
    with pytest.raises(ValueError, match="does not match task"):
        R.compute_score("multi_turn_miss_param", "", None, extra(trace))
    with pytest.raises(ValueError, match="ground_truth differs"):
        R.compute_score(task.category, "", json.dumps([["ls()"]]), extra(trace))
    d = trace.to_dict()
    d["turns"] = d["turns"][:2]
    with pytest.raises(ValueError, match="2 turns"):
        R.compute_score(task.category, "", None, {R.TRACE_KEY: json.dumps(d)})


def test_unknown_option_is_an_error(samples):
    task, trace = samples[("json", "pass")]
    with pytest.raises(ValueError, match="unknown option"):
        score(task, trace, strict_abstension=True)
    with pytest.raises(ValueError, match="true or false"):
        score(task, trace, dense_credit="maybe")
    # what verl's reward managers pass besides reward_kwargs is accepted
    assert score(task, trace, reward_router_address=None, reward_model_tokenizer=None)["score"] == 1.0


# ----------------------------------------------------------------------------------------------------------
# through verl's own code paths
# ----------------------------------------------------------------------------------------------------------


def verl_config(tokenizer_dir: str, path: str = str(REWARD_FILE), **reward_kwargs):
    from omegaconf import OmegaConf

    return OmegaConf.create({
        "actor_rollout_ref": {"model": {"path": tokenizer_dir, "tokenizer_path": None}},
        "reward": {
            "custom_reward_function": {"path": path, "name": "compute_score",
                                       "reward_kwargs": dict(reward_kwargs)},
            "reward_manager": {"source": "register", "name": "naive", "module": {"path": None, "name": "x"}},
            "reward_model": {"enable": False},
        },
    })


def test_loaded_by_verl_get_custom_reward_fn(samples):
    from verl.trainer.ppo.reward import get_custom_reward_fn

    task, trace = samples[("json", "spurious_tool_call")]
    strict = get_custom_reward_fn(verl_config("unused"))
    lenient = get_custom_reward_fn(verl_config("unused", strict_abstention=False, dense_credit=True))
    kw = dict(data_source=task.category, solution_str="", ground_truth=json.dumps(task.ground_truth),
              extra_info=extra(trace))
    assert strict(**kw)["score"] == 0.0 and lenient(**kw)["score"] == 1.0
    assert strict(**kw)["acc"] == 1.0
    by_package = get_custom_reward_fn(verl_config("unused", path="pkg://reward_fns.bfcl_reward", strict_abstention=False))
    assert by_package(**kw)["score"] == 1.0


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    from seal_verl.models.tiny_model import build_tokenizer

    path = tmp_path_factory.mktemp("tok")
    build_tokenizer().save_pretrained(str(path))
    return str(path)


def make_batch(items, tokenizer):
    """A DataProto like the agent loop hands to the reward loop: extra_info from the parquet row, the agent
    loop's extra_fields as tool_extra_fields."""
    import torch

    from verl import DataProto

    resp = tokenizer("Done.")["input_ids"]
    n, p = len(items), 4
    responses = torch.tensor([resp] * n)
    prompts = torch.zeros((n, p), dtype=torch.long)
    attention = torch.ones((n, p + len(resp)), dtype=torch.long)
    non_tensor = {
        "data_source": np.array([t.category for t, _ in items], dtype=object),
        "reward_model": np.array([{"style": "rule", "ground_truth": json.dumps(t.ground_truth)} for t, _ in items],
                                 dtype=object),
        "extra_info": np.array([{"index": i, "task_id": t.id, "split": "train", "call_format": "json"}
                                for i, (t, _) in enumerate(items)], dtype=object),
        "tool_extra_fields": np.array([{R.TRACE_KEY: tr_.to_json()} for _, tr_ in items], dtype=object),
        "__num_turns__": np.array([len(tr_.turns) for _, tr_ in items]),
    }
    return DataProto.from_dict(tensors={"responses": responses, "prompts": prompts, "attention_mask": attention},
                               non_tensors=non_tensor)


def test_through_verls_reward_loop_worker(samples, tokenizer_dir):
    """verl 0.9.1's RewardLoopWorker (in-process, as each Ray reward worker runs it) with the naive manager:
    file loaded by path, reward_kwargs merged, extra_fields merged into extra_info, extras stackable."""
    from verl.experimental.reward_loop.reward_loop import RewardLoopWorker

    items = [samples[("json", n)] for n in ("pass", "spurious_tool_call", "recovery_failure", "invalid_tool_call")]
    results = {}
    for strict in (True, False):
        worker = RewardLoopWorker(verl_config(tokenizer_dir, strict_abstention=strict))
        data = make_batch(items, worker.input_tokenizer)
        outs = worker.loop.run_until_complete(worker.compute_score_batch(data))
        results[strict] = outs
        assert [o["reward_score"] for o in outs] == [1.0, 0.0 if strict else 1.0, 0.0, 0.0]
        extras = [o["reward_extra_info"] for o in outs]
        assert len({tuple(e) for e in extras}) == 1 and tuple(extras[0]) == R.RESULT_KEYS
        assert [json.loads(e["seal_labels"]) for e in extras] == [
            EXPECTED_LABELS[n] for n in ("pass", "spurious_tool_call", "recovery_failure", "invalid_tool_call")]
        # the agent-loop side stacks the extras per key (agent_loop.py: np.array([info[key] ...]))
        for key in extras[0]:
            assert np.array([e[key] for e in extras]).shape == (len(items),)
    assert [o["reward_extra_info"]["acc"] for o in results[True]] == [1.0, 1.0, 0.0, 0.0]


def test_extras_feed_the_trainer_side(samples):
    """The trainer-side glue reads the extras back into trajectory records and profiles."""
    from seal_verl.core.extras import decode

    for task, trace in samples.values():
        out = score(task, trace)
        rec = decode(out).record
        assert rec.labels == json.loads(out["seal_labels"]) and rec.reward == out["score"]
        assert rec.category == task.category
        assert decode(out).profile == pytest.approx(rec.profile())
