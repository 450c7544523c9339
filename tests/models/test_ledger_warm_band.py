"""The ledger warm start's reading of its model's behaviour (seal_verl.models.warm_start.ledger_stages): the sampled label
mix and the band the learning benchmark's settings were chosen for. The first three mixes below were measured: the
mixed stage's model, the four-stage model it starts from, and the model the first two stages built on a second
machine (docs/benchmarks.md)."""

from __future__ import annotations

import pytest

from seal_verl.models.warm_start import ledger_stages as pl


def info_from(counts: dict) -> dict:
    """A warm_start.json's pass_rates with these label counts, two turns per task."""
    flat = [z for z, n in counts.items() for _ in range(n)]
    assert len(flat) % 2 == 0
    return {"pass_rates": {f"t{i}": {"labels": [flat[2 * i:2 * i + 2]], "pass_rate": 0.0}
                           for i in range(len(flat) // 2)}}


@pytest.mark.parametrize("counts, right_tool, problems", [
    # after the mixed stage (ledger_mix): a quarter of the turns on the right tool, a tenth exactly right
    ({"missing_tool_call": 63, "invalid_tool_call": 26, "argument_mismatch": 19, "pass": 14, "state_mismatch": 6},
     0.26, []),
    # after the four supervised stages: the right tool on most turns, little left to sharpen but the arguments
    ({"argument_mismatch": 95, "pass": 24, "invalid_tool_call": 5, "state_mismatch": 2, "missing_tool_call": 2},
     0.93, ["right_tool"]),
    # after two stages on the second machine: half the turns without a call, a third malformed
    ({"missing_tool_call": 67, "invalid_tool_call": 37, "pass": 8, "argument_mismatch": 8, "spurious_tool_call": 5,
      "state_mismatch": 3}, 0.125, ["right_tool"]),
    # right tool always, never an exact argument
    ({"argument_mismatch": 128}, 1.0, ["right_tool", "pass"]),
    # exactly right almost always: little left to learn
    ({"pass": 100, "argument_mismatch": 28}, 1.0, ["right_tool", "pass"]),
])
def test_behaviour_and_band(counts, right_tool, problems):
    b = pl.behaviour(info_from(counts))
    assert b["right_tool"] == pytest.approx(right_tool, abs=0.01)
    assert [p.split()[0] for p in b["problems"]] == problems
    assert abs(sum(b["mix"].values()) - 1.0) < 1e-9 and list(b["mix"])[0] == max(counts, key=counts.get)


def test_no_sampled_rollouts_is_a_problem_not_a_crash():
    assert pl.behaviour({})["problems"] == ["no sampled rollouts recorded"]
