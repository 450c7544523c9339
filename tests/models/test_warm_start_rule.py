"""The CPU run's warm start stops per task, so that no task is left where GRPO has no signal.

A task the model always fails (or always passes) gives a group of one outcome and a zero advantage. The former rule
stopped once the mean of the tasks' predicted pass rates reached the target, which let one task near 1 hide another
near 0 (the default warm start then passed miss_param_100 in 0 of 4 samples), and a step whose groups all scored
alike failed `seal-verl check` (`0/16 rollouts with a non-zero GRPO advantage`).
"""

from __future__ import annotations

import pytest

from seal_verl.models.warm_start import finetune as WS
TASKS = ["base_100", "base_104", "miss_func_100", "miss_param_100"]


@pytest.mark.parametrize("predicted, still", [
    # the default warm start's last epoch under the former rule: mean 0.51 >= 0.5, yet one task at 0.36
    ([0.69, 0.51, 0.48, 0.36], ["miss_func_100", "miss_param_100"]),
    # one memorised task and one never passed: the mean is at the target, two tasks are not
    ([1.0, 0.0, 0.5, 0.5], ["base_104"]),
    ([0.0, 0.0, 0.0, 0.0], TASKS),
    # every task there (the boundary counts): stop
    ([0.5, 0.9, 0.5, 0.7], []),
    # a NaN NLL never counts as reached
    ([float("nan"), 0.9, 0.9, 0.9], ["base_100"]),
])
def test_training_goes_on_until_every_task_reaches_the_target(predicted, still):
    assert WS.tasks_to_train(TASKS, predicted, 0.5) == still


def test_a_mismatch_of_tasks_and_rates_is_an_error():
    with pytest.raises(WS.WarmStartError, match="4 tasks but 3"):
        WS.tasks_to_train(TASKS, [0.5, 0.5, 0.5], 0.5)
