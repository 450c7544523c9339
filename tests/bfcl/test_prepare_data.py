"""prepare-data: verl RL dataset rows for the SEAL split, read back with pandas and with verl's RLHFDataset."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from env_wrappers.bfcl.environment.prepare_data import EVAL_AGENT, TRAIN_AGENT, build_rows, prepare_data, read_split_file
from env_wrappers.bfcl.environment.tasks import CATEGORIES, load_split
from seal_verl.cli import main as cli_main

COLUMNS = {"data_source", "agent_name", "prompt", "ability", "reward_model", "extra_info"}


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    out = tmp_path_factory.mktemp("data")
    summary = prepare_data(str(out))
    return out, summary


def test_files_rows_and_columns(written, tasks):
    out, summary = written
    split = load_split()
    for name, agent in (("train", TRAIN_AGENT), ("eval", EVAL_AGENT)):
        df = pd.read_parquet(out / f"{name}.parquet")
        assert len(df) == 400 and set(df.columns) == COLUMNS
        assert set(df["agent_name"]) == {agent}
        assert df["data_source"].value_counts().to_dict() == {c: 100 for c in CATEGORIES}
        assert set(df["ability"]) == {"tool_use"}
        ids = [e["task_id"] for e in df["extra_info"]]
        assert ids == split[name]
        for i, row in enumerate(df.itertuples()):
            task = tasks[row.extra_info["task_id"]]
            assert row.extra_info == {"index": i, "task_id": task.id, "split": name, "call_format": "json"}
            assert row.data_source == task.category
            assert [dict(m) for m in row.prompt] == task.questions[0]
            assert json.loads(row.reward_model["ground_truth"]) == task.ground_truth
            assert row.reward_model["style"] == "rule"
        assert summary["splits"][name]["rows"] == 400
    train = pd.read_parquet(out / "train.parquet")
    evl = pd.read_parquet(out / "eval.parquet")
    assert not {e["task_id"] for e in train["extra_info"]} & {e["task_id"] for e in evl["extra_info"]}


def test_prompt_is_only_the_first_user_turn(written, tasks):
    out, _ = written
    df = pd.read_parquet(out / "train.parquet")
    for row in df.itertuples():
        msgs = list(row.prompt)
        assert len(msgs) == 1 and msgs[0]["role"] == "user"
        task = tasks[row.extra_info["task_id"]]
        later = [m["content"] for q in task.questions[1:] for m in q]
        assert all(c not in msgs[0]["content"] for c in later if len(c) > 20)


def test_cli_with_python_format_and_custom_split(tmp_path, capsys, tasks):
    split = {"train": ["multi_turn_base_0", "multi_turn_miss_func_0"], "eval": ["multi_turn_long_context_3"]}
    sf = tmp_path / "split.json"
    sf.write_text(json.dumps(split))
    rc = cli_main(["prepare-data", "--out", str(tmp_path / "o"), "--call-format", "python", "--split-file", str(sf)])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "train" in printed and "seal_bfcl" in printed and "wrote" in printed
    df = pd.read_parquet(tmp_path / "o" / "train.parquet")
    assert [e["task_id"] for e in df["extra_info"]] == split["train"]
    assert {e["call_format"] for e in df["extra_info"]} == {"python"}
    assert len(pd.read_parquet(tmp_path / "o" / "eval.parquet")) == 1


@pytest.mark.parametrize("content,match", [
    ({"train": ["multi_turn_base_0", "multi_turn_base_9999", "nope"], "eval": ["multi_turn_base_1"]},
     "2 unknown task id.*multi_turn_base_9999, nope"),
    ({"train": ["multi_turn_base_0", "multi_turn_base_0"], "eval": ["multi_turn_base_1"]}, "duplicate"),
    ({"train": ["multi_turn_base_0"], "eval": ["multi_turn_base_0"]}, "both train and eval"),
    ({"train": [], "eval": ["multi_turn_base_0"]}, "'train' is empty"),
    ({"train": ["multi_turn_base_0"]}, "'eval' must be a list"),
    (["multi_turn_base_0"], "expected a JSON object"),
])
def test_bad_split_files_are_clear_errors(tmp_path, capsys, content, match):
    sf = tmp_path / "split.json"
    sf.write_text(json.dumps(content))
    with pytest.raises(ValueError, match=match):
        read_split_file(str(sf))
    rc = cli_main(["prepare-data", "--out", str(tmp_path / "o"), "--split-file", str(sf)])
    assert rc == 2 and "error:" in capsys.readouterr().err
    assert not (tmp_path / "o" / "train.parquet").exists()


def test_missing_or_invalid_split_file(tmp_path):
    with pytest.raises(FileNotFoundError):
        read_split_file(str(tmp_path / "absent.json"))
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        read_split_file(str(bad))


def test_bad_arguments():
    with pytest.raises(ValueError, match="call format"):
        build_rows(["multi_turn_base_0"], "train", "fc")
    with pytest.raises(ValueError, match="unknown split"):
        build_rows(["multi_turn_base_0"], "test")
    with pytest.raises(SystemExit):
        cli_main(["prepare-data", "--out", "x", "--call-format", "fc"])


# ----------------------------------------------------------------------------------------------------------
# verl's own dataset
# ----------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tokenizer():
    from seal_verl.models.tiny_model import build_tokenizer

    return build_tokenizer()  # a Qwen-style chat template, as verl's length filter needs


def test_loads_through_verls_rlhf_dataset(written, tokenizer, tmp_path):
    from omegaconf import OmegaConf
    from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn

    out, _ = written
    cfg = OmegaConf.create({
        "prompt_key": "prompt", "max_prompt_length": 1024, "filter_overlong_prompts": True,
        "filter_overlong_prompts_workers": 1, "truncation": "error", "cache_dir": str(tmp_path / "cache"),
        "return_raw_chat": True,
    })
    for name, agent in (("train", TRAIN_AGENT), ("eval", EVAL_AGENT)):
        ds = RLHFDataset(data_files=str(out / f"{name}.parquet"), tokenizer=tokenizer, config=cfg)
        assert len(ds) == 400  # no prompt filtered out as too long
        item = ds[0]
        assert item["agent_name"] == agent
        assert item["data_source"] in CATEGORIES
        assert item["raw_prompt"][0]["role"] == "user" and item["raw_prompt"][0]["content"]
        assert item["extra_info"]["task_id"] == load_split()[name][0] and item["index"] == 0
        assert json.loads(item["reward_model"]["ground_truth"])
        batch = collate_fn([ds[0], ds[1]])
        assert list(batch["agent_name"]) == [agent, agent]
        assert [e["task_id"] for e in batch["extra_info"]] == load_split()[name][:2]
