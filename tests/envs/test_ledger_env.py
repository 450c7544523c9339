"""The ledger environment (env_wrappers/ledger): seeded splits, episodes, verifier + Psi labels, registration."""

from __future__ import annotations

import json
import os
import re

import pytest

from _paths import REPO

from env_wrappers.ledger.backend import render_call
from env_wrappers.ledger.tasks import FAMILIES, all_tasks
from env_wrappers.protocol import ABSTAIN_TEXT, CLOSING_TEXT
from env_wrappers.registry import get_environment
from seal_verl.core.diagnosis import diagnose

ENV = get_environment("ledger")


def first_of(family: str, split: str = "train"):
    return next(t for t in all_tasks()[split].values() if t.category == family)


def play(task, turns: list[list[str]]):
    """Feed each turn's messages (a turn ends at its first message without a call); returns (verification, labels)."""
    episode = ENV.start(task, call_format="json")
    episode.reset()
    for messages in turns:
        for text in list(messages) + [CLOSING_TEXT]:
            if episode.done:
                break
            if episode.step(text).turn_done:
                break
    if not episode.done:
        episode.terminate()
    v = ENV.verify(task, episode.trace)
    return v, diagnose(episode.trace, v.checks).labels


def call(name, **arguments):
    return render_call({"name": name, "arguments": arguments})


def test_splits_are_seeded_sized_and_disjoint():
    a, b = all_tasks(), all_tasks()
    assert len(a["train"]) >= 64 and len(a["eval"]) >= 32
    assert [t.turns for t in a["train"].values()] == [t.turns for t in b["train"].values()]
    assert {t.category for t in a["eval"].values()} == set(FAMILIES)
    assert not {t.key for t in a["train"].values()} & {t.key for t in a["eval"].values()}
    assert ENV.task_ids("train") == list(a["train"]) and ENV.task_ids("eval") == list(a["eval"])
    with pytest.raises(KeyError):
        ENV.load_task("ledger_train_999")


@pytest.mark.parametrize("split", ["train", "eval"])
def test_reference_passes_every_task(split):
    for task in all_tasks()[split].values():
        v, labels = play(task, ENV.reference_turns(task, "json"))
        assert v.valid and v.reward_valid, (task.id, labels)
        assert labels == ["pass"] * len(task.turns)


def _outputs():
    """(family, turn-0 messages, turn-1 messages, expected labels): one model behaviour each."""
    dc = first_of("deposit_check")
    x, a = dc.ground_truth[0][0]["arguments"]["account"], dc.ground_truth[0][0]["arguments"]["amount"]
    good_check = call("get_balance", account=x)
    ta = first_of("transfer_ask")
    t_args = ta.ground_truth[0][0]["arguments"]
    sw = first_of("sweep")
    s_args = sw.ground_truth[0][1]["arguments"]
    return [
        ("deposit_check", [call("deposit", account=x, amount=a)], [good_check], ["pass", "pass"]),
        ("deposit_check", ['<tool_call>\n{"name": "deposit", "arguments": {"account": \n</tool_call>'], [good_check],
         ["invalid_tool_call", "pass"]),
        ("deposit_check", [call("open_account", account=x)], [good_check], ["invalid_tool_call", "pass"]),
        # a malformed call corrected in the same turn passes it (judged on the end state, as BFCL judges a turn) ...
        ("deposit_check", ['<tool_call>\n{"name": "deposit", "arguments": {"account": \n</tool_call>',
                           call("deposit", account=x, amount=a)], [good_check], ["pass", "pass"]),
        # ... and one followed by a wrong call leaves the turn failed, labelled by Psi's priority
        ("deposit_check", ['<tool_call>\n{"name": "deposit", "arguments": {"account": \n</tool_call>',
                           call("deposit", account=x, amount=a + 1)], [good_check], ["invalid_tool_call", "pass"]),
        ("deposit_check", [call("deposit", account=x, amount=str(a))], [good_check], ["argument_mismatch", "pass"]),
        ("deposit_check", [call("deposit", account=x, amount=a + 1)], [good_check], ["argument_mismatch", "pass"]),
        ("deposit_check", ["Sure, done."], [good_check], ["missing_tool_call", "pass"]),
        ("deposit_check", [call("withdraw", account=x, amount=1)], [good_check], ["state_mismatch", "pass"]),
        ("deposit_check", [call("deposit", account=x, amount=a)], [call("withdraw", account=x, amount=999)],
         ["pass", "recovery_failure"]),
        ("deposit_check", [call("deposit", account=x, amount=a)], ["It is fine."], ["pass", "missing_tool_call"]),
        ("transfer_ask", [call("transfer", **t_args)], [ABSTAIN_TEXT], ["pass", "pass"]),
        ("transfer_ask", [call("transfer", **t_args)], [call("deposit", account=t_args["target"], amount=5)],
         ["pass", "spurious_tool_call"]),
        ("transfer_ask", [call("transfer", source=t_args["source"], target=t_args["target"], amount=10_000)],
         [ABSTAIN_TEXT], ["argument_mismatch", "pass"]),
        # sweep: the amount must be read from the balance the first call returns
        ("sweep", [call("get_balance", account=s_args["source"]), call("transfer", **s_args)],
         [call("get_balance", account=s_args["target"])], ["pass", "pass"]),
        ("sweep", [call("get_balance", account=s_args["source"]),
                   call("transfer", **dict(s_args, amount=s_args["amount"] - 1))],
         [call("get_balance", account=s_args["target"])], ["argument_mismatch", "pass"]),
        ("sweep", [call("transfer", **s_args)], [call("get_balance", account=s_args["target"])],
         ["missing_tool_call", "pass"]),
    ]


@pytest.mark.parametrize("family,turn0,turn1,expected", _outputs())
def test_model_output_gets_label(family, turn0, turn1, expected):
    _, labels = play(first_of(family), [turn0, turn1])
    assert labels == expected


def test_a_malformed_call_is_answered_with_an_error_and_the_turn_goes_on():
    task = first_of("deposit_check")
    episode = ENV.start(task, call_format="json")
    episode.reset()
    result = episode.step('<tool_call>\n{"name": "deposit", \n</tool_call>')
    assert not result.turn_done and episode.turn == 0
    [shown] = result.tool_results
    assert shown.is_error and shown.content.startswith("Error: the tool call could not be decoded")
    # the error-recovery cue reads the same record (feedback on the shown result, not carried to the next turn)
    from seal_verl.core.observation import SealObservationWrapper
    from seal_verl.core.interface import CUE_KINDS, ERROR_RECOVERY, InterfaceConfig, InterfaceState

    state = InterfaceState(active={k: k == ERROR_RECOVERY for k in CUE_KINDS}, streak_below={k: 0 for k in CUE_KINDS})
    cued = SealObservationWrapper(ENV.start(task, call_format="json"), state, InterfaceConfig())
    cued.reset()
    [fed] = cued.step('<tool_call>\n{"name": "deposit", \n</tool_call>').tool_results
    assert len(fed.content) > len(shown.content) and fed.content.startswith(shown.content)


def test_psi_sees_at_least_five_failure_labels():
    seen = {lab for *_, exp in _outputs() for lab in exp} - {"pass"}
    assert {"invalid_tool_call", "argument_mismatch", "missing_tool_call", "recovery_failure",
            "spurious_tool_call"} <= seen


@pytest.mark.parametrize("payload", [
    '{"name": "deposit", "arguments": {"account": "__import__(\'os\').system(\'echo hi\')", "amount": 1}}',
    '{"name": "__class__", "arguments": {}}',
    '{"name": "run", "arguments": {"name": "deposit", "arguments": {}}}',
    "[1, 2, 3]",
    "x" * 5000,
])
def test_untrusted_call_text_is_never_code(payload):
    task = first_of("deposit_check")
    episode = ENV.start(task, call_format="json")
    episode.reset()
    result = episode.step("<tool_call>" + payload + "</tool_call>")
    rec = result.attempt.calls[0]
    assert not (rec.parsed and rec.executed and not rec.is_error)
    assert episode.backend.state() == dict(sorted(task.balances.items()))


def test_dataset_rows_name_the_environment_and_fit_a_small_prompt():
    rows = ENV.dataset_rows(ENV.task_ids("train")[:3], "train", "json")
    assert [r["extra_info"]["env"] for r in rows] == ["ledger"] * 3
    msgs, tools = ENV.initial_messages(ENV.load_task(rows[0]["extra_info"]["task_id"]), rows[0]["prompt"], "json")
    # the tool docs plus one user turn stay small (a BFCL first prompt is ~20k characters)
    assert len(json.dumps(tools)) + sum(len(m["content"]) for m in msgs) < 2500


def _compose_ledger(*overrides: str):
    """The ledger run's config as run_ledger.sh composes it (recipe + CPU overlay + ledger overlay)."""
    pytest.importorskip("verl")
    import verl  # noqa: F401  (registers SEAL's estimator and trainer)
    from hydra import compose, initialize_config_dir

    recipe, ledger = os.path.join(REPO, "recipes", "bfcl_v3"), os.path.join(REPO, "recipes", "ledger_cpu")
    with initialize_config_dir(config_dir=os.path.join(recipe, "config"), version_base=None):
        return compose(config_name="bfcl_v3", overrides=[
            f"hydra.searchpath=[pkg://verl.trainer.config,file://{recipe}/cpu/config,file://{ledger}/config]",
            "backbone=qwen2.5-3b", "+cpu=tiny", "+learn=ledger", f"recipe.dir={recipe}",
            f"recipe.ledger_dir={ledger}", "recipe.data_dir=/data", "actor_rollout_ref.model.path=/model",
            "seal.run_dir=/run", *overrides])


def test_the_ledger_overlay_composes_with_the_sweeps_choice_and_the_recipes_cues():
    """``+learn=ledger`` on the recipe and the CPU overlay: a valid run config whose learning rate, group size and
    near-miss credit are the ones docs/changelog.md says the sweeps chose, with the recipe's start-of-task cues on."""
    from seal_verl.verl_glue.config import check_run_config

    cfg = _compose_ledger("variant=seal")
    check_run_config(cfg)
    docs = " ".join(open(os.path.join(REPO, "docs", "changelog.md"), encoding="utf-8").read().split())
    lr, n, near = re.search(r"The recipe's values are now lr ([0-9.e-]+), group size (\d+), near-miss credit "
                            r"([0-9.]+)", docs).groups()
    assert cfg.actor_rollout_ref.actor.optim.lr == float(lr)
    assert cfg.actor_rollout_ref.rollout.n == int(n)
    assert cfg.seal.interface.proactive_cues is True
    assert cfg.reward.custom_reward_function.reward_kwargs.dense_credit is True
    assert cfg.reward.custom_reward_function.reward_kwargs.near_miss_credit == float(near)
    assert cfg.data.max_prompt_length <= 1280


def test_the_warm_start_reads_the_cue_kinds_the_ledger_run_switches_on():
    """The ledger overlay's trigger map (the behavioural sentence for missing_tool_call, the affordance cue the
    shipped warm start was trained on) is the one the warm start renders its cued rows under."""
    from seal_verl.verl_glue.config import check_run_config
    from seal_verl.models.warm_start import ledger as L

    cfg = check_run_config(_compose_ledger("variant=seal")).interface
    assert cfg.triggers == L.LEDGER_TRIGGERS and cfg.kinds() == L.WARM_KINDS
    assert "act_with_tools" in L.WARM_KINDS and "tool_affordance" not in L.WARM_KINDS


def _ledger_score(task, turns, **options) -> float:
    """The training reward (``score``) of a played rollout, through the reward function verl loads."""
    from reward_fns.seal_reward import compute_score

    episode = ENV.start(task, call_format="json")
    episode.reset()
    for messages in turns:
        for text in list(messages) + [CLOSING_TEXT]:
            if episode.done or episode.step(text).turn_done:
                break
    if not episode.done:
        episode.terminate()
    extra = {"task_id": task.id, "seal_trace": episode.trace.to_json(), "env": "ledger"}
    return compute_score(data_source=task.category, solution_str="", ground_truth=None, extra_info=extra,
                         **options)["score"]


def test_near_miss_credit_lifts_a_wrong_argument_above_never_calling():
    """The sweep's finding (docs/changelog.md): under the dense reward with strict abstention, a rollout that
    never calls keeps its abstention turn's credit and ties with one that calls the right tool with a wrong
    amount, so GRPO has no reason to keep calling. ``near_miss_credit`` breaks the tie, and only for
    ``argument_mismatch``: a wrong tool still earns nothing."""
    task = first_of("transfer_ask")
    args = task.ground_truth[0][0]["arguments"]
    never = [["Sure."], [ABSTAIN_TEXT]]
    near = [[call("transfer", **dict(args, amount=args["amount"] + 1))], [ABSTAIN_TEXT]]
    wrong_tool = [[call("deposit", account=args["target"], amount=args["amount"])], [ABSTAIN_TEXT]]
    dense = {"dense_credit": True}
    assert _ledger_score(task, never, **dense) == _ledger_score(task, near, **dense) == 0.5
    shaped = dict(dense, near_miss_credit=0.5)
    assert _ledger_score(task, near, **shaped) == 0.75
    assert _ledger_score(task, never, **shaped) == _ledger_score(task, wrong_tool, **shaped) == 0.5
    assert _ledger_score(task, ENV.reference_turns(task, "json"), **shaped) == 1.0


def test_argument_credit_ranks_near_misses_by_the_arguments_they_got_right():
    """Flat near-miss credit pays every call of the right tool the same, so once a group names the right tools
    its rewards tie and GRPO's advantage is zero (the 20-step runs plateaued there). ``argument_credit`` adds a
    share per matching argument: a transfer with one argument wrong earns more than one with two wrong, which
    earns more than none right, and all stay below a pass."""
    task = first_of("transfer_ask")
    args = task.ground_truth[0][0]["arguments"]
    others = [a for a in ("alice", "bob", "carol", "dave") if a not in (args["source"], args["target"])]
    one_wrong = dict(args, amount=args["amount"] + 1)
    two_wrong = dict(one_wrong, target=others[0])
    all_wrong = dict(two_wrong, source=others[1])
    opts = {"dense_credit": True, "near_miss_credit": 0.25, "argument_credit": 0.5}
    score = {name: _ledger_score(task, [[call("transfer", **a)], [ABSTAIN_TEXT]], **opts)
             for name, a in (("one", one_wrong), ("two", two_wrong), ("all", all_wrong))}
    # two checked turns: the abstention turn passes (1), the transfer earns 0.25 + 0.5 x share
    assert score == pytest.approx({"one": (1 + 0.25 + 0.5 * 2 / 3) / 2, "two": (1 + 0.25 + 0.5 / 3) / 2,
                                   "all": (1 + 0.25) / 2})
    assert _ledger_score(task, ENV.reference_turns(task, "json"), **opts) == 1.0
    # without the option the three tie (the plateau)
    flat = {"dense_credit": True, "near_miss_credit": 0.25}
    assert len({_ledger_score(task, [[call("transfer", **a)], [ABSTAIN_TEXT]], **flat)
                for a in (one_wrong, two_wrong, all_wrong)}) == 1


@pytest.mark.parametrize("gt,made,share", [
    ([{"name": "deposit", "arguments": {"account": "bob", "amount": 3}}], [("deposit", {"account": "bob", "amount": 4})], 0.5),
    ([{"name": "deposit", "arguments": {"account": "bob", "amount": 3}}], [("withdraw", {"account": "bob", "amount": 3})], 0.0),
    ([{"name": "deposit", "arguments": {"account": "bob", "amount": 3}}],
     [("deposit", {"account": "ann", "amount": 3}), ("deposit", {"account": "bob", "amount": 3})], 1.0),
    ([{"name": "get_balance", "arguments": {"account": "bob"}}, {"name": "transfer", "arguments": {"source": "bob", "target": "ann", "amount": 7}}],
     [("get_balance", {"account": "bob"})], 0.5),
    ([{"name": "deposit", "arguments": {"account": "bob", "amount": 3}}], [("deposit", {"account": "bob", "amount": "3"})], 0.5),
    ([{"name": "ping", "arguments": {}}], [("ping", {})], 1.0),
    ([], [("deposit", {"account": "bob", "amount": 3})], 0.0),
])
def test_argument_share(gt, made, share):
    from env_wrappers.episode import argument_share
    from seal_verl.core.trace import CallRecord

    calls = [CallRecord(name=n, arguments=a) for n, a in made]
    assert argument_share(gt, calls) == pytest.approx(share)


@pytest.mark.parametrize("options,message", [
    ({"argument_credit": 0.5}, "needs dense_credit"),
    ({"dense_credit": True, "argument_credit": 1.0}, "in [0, 1)"),
    ({"dense_credit": True, "near_miss_credit": 0.5, "argument_credit": 0.5}, "must be below 1"),
    ({"dense_credit": True, "argument_credit": "most"}, "must be a number"),
])
def test_argument_credit_refuses_bad_values(options, message):
    task = first_of("deposit_check")
    with pytest.raises(ValueError, match=re.escape(message)) as err:
        _ledger_score(task, ENV.reference_turns(task, "json"), **options)
    assert "argument_credit" in str(err.value)


@pytest.mark.parametrize("options,message", [
    ({"near_miss_credit": 0.5}, "needs dense_credit"),
    ({"dense_credit": True, "near_miss_credit": 1.0}, "in [0, 1)"),
    ({"dense_credit": True, "near_miss_credit": -0.1}, "in [0, 1)"),
    ({"dense_credit": True, "near_miss_credit": "half"}, "must be a number"),
    ({"dense_credit": True, "near_miss_credit": True}, "must be a number"),
])
def test_near_miss_credit_refuses_bad_values(options, message):
    task = first_of("deposit_check")
    with pytest.raises(ValueError, match=re.escape(message)) as err:
        _ledger_score(task, ENV.reference_turns(task, "json"), **options)
    assert "near_miss_credit" in str(err.value)


@pytest.mark.parametrize("value,message", [(1.5, "in [0, 1)"), ("lots", "must be a number")])
def test_a_bad_reward_option_stops_the_run_at_start_up(value, message):
    """The check the SEAL trainer runs before any worker starts (``check_run_config``) parses the reward options
    as the reward function will, so a bad ``near_miss_credit`` is one line at start-up, not an error in the first
    reward call minutes later."""
    from seal_verl.verl_glue.config import SealConfigError, check_run_config

    cfg = _compose_ledger("variant=grpo", f"reward.custom_reward_function.reward_kwargs.near_miss_credit={value}")
    with pytest.raises(SealConfigError, match=re.escape(message)) as err:
        check_run_config(cfg)
    assert "near_miss_credit" in str(err.value) and "reward_kwargs" in str(err.value)


def test_the_stated_prompt_lengths_are_what_the_tokenizer_gives():
    """The ledger overlay states the first prompt's length and what the start-of-task cue blocks add to it; both
    are measured (``bench.bench_cue_tokens``) with the shipped warm start's tokenizer on every training task."""
    from transformers import AutoTokenizer

    from bench.bench_cue_tokens import first_prompt_tokens

    with open(os.path.join(REPO, "recipes", "ledger_cpu", "config", "learn", "ledger.yaml"), encoding="utf-8") as fh:
        text = " ".join(fh.read().split())
    low, high, added = map(int, re.search(r"first prompt (\d+)-(\d+) tokens; every start-of-task cue block on adds "
                                          r"(\d+)", text).groups())
    tokenizer = AutoTokenizer.from_pretrained(os.path.join(REPO, "recipes", "ledger_cpu", "model"))
    bare, cued = [], []
    for task_id in ENV.task_ids("train"):
        task = ENV.load_task(task_id)
        bare.append(first_prompt_tokens(ENV, task, tokenizer, "json", cues=False))
        cued.append(first_prompt_tokens(ENV, task, tokenizer, "json", cues=True))
    assert (min(bare), max(bare)) == (low, high)
    assert {c - b for b, c in zip(bare, cued)} == {added}
