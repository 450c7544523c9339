"""The one module that reaches into verl internals: version check and the reaches themselves."""

from __future__ import annotations

import re

import pytest

from seal_verl.verl_glue import compat


def test_installed_verl_is_the_checked_one():
    assert compat.check_verl_version() == compat.CHECKED_VERL == "0.9.1"


def test_other_verl_versions_are_refused_with_one_clear_line():
    with pytest.raises(compat.VerlVersionError) as err:
        compat.check_verl_version(lookup=lambda: "0.10.0")
    text = str(err.value)
    assert "\n" not in text and "verl==0.9.1" in text and "verl==0.10.0" in text and "compat.py" in text
    with pytest.raises(compat.VerlVersionError, match="verl not installed"):
        compat.check_verl_version(lookup=lambda: None)


def test_each_reach_names_what_it_relies_on():
    """A reach is done here (a callable of the same name) or its entry names the glue module that does it."""
    for name, relies_on in compat.REACHES.items():
        assert relies_on.strip(), name
        assert callable(getattr(compat, name, None)) or re.search(r"\b\w+\.py\b", relies_on), name


def test_session_of_transfer_queue_keys():
    assert compat.session_of_key("9f0c-uid_3_0") == "9f0c-uid_3"
    assert compat.session_of_key("a_b_c_1_2") == "a_b_c_1"
    assert compat.session_of_key("nounderscore") is None


def test_replay_buffer_wrapper_sees_one_partition_and_is_removed():
    class Buffer:
        def sample(self, partition_id=None):
            return [partition_id]

    class Trainer:
        replay_buffer = Buffer()

    trainer, seen = Trainer(), []
    with compat.wrap_replay_buffer_sample(trainer, "val", seen.append):
        trainer.replay_buffer.sample(partition_id="train")
        trainer.replay_buffer.sample(partition_id="val")
    assert seen == [["val"]]
    assert "sample" not in vars(trainer.replay_buffer)


def test_agent_loop_registry_holds_the_seal_loops():
    import verl  # noqa: F401 - the plugin registers the loops

    registry = compat.agent_loop_registry()
    for name in ("seal_bfcl", "bfcl", "seal_env", "env"):
        assert registry[name]["_target_"].startswith("seal_verl.verl_glue.agent_loop.")
