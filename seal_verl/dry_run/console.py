"""The dry run's console output: one line per step (label prevalence, cues, rho, weights, cue tokens)."""

from __future__ import annotations

from seal_verl.core.cue_effect import short_line
from seal_verl.core.interface import SHORT_NAMES

_SHORT_LABELS = (("invalid_tool_call", "inv"), ("argument_mismatch", "arg"), ("state_mismatch", "state"),
                 ("recovery_failure", "recov"), ("missing_tool_call", "miss"), ("response_mismatch", "resp"),
                 ("spurious_tool_call", "spur"), ("pass", "pass"))


def _kinds(kinds: list[str]) -> str:
    return ",".join(SHORT_NAMES.get(k, k) for k in kinds) or "-"


def header_line() -> str:
    labels = " ".join(f"{short:>5}" for _, short in _SHORT_LABELS)
    return (f"step  succ | label prevalence: {labels} | cues on (this step)      | next step                | "
            f"rho inv   arg  recov miss | w mean+-std    | cue tok/rollout")


def format_row(row: dict) -> str:
    """One printed line per step: label prevalence, active cue kinds, rho, weights, cue tokens."""
    prev = row["prevalence"]
    labels = " ".join(f"{prev.get(k, 0.0):5.2f}" for k, _ in _SHORT_LABELS)
    rho = row["rho"]
    rhos = " ".join(f"{rho[k]:4.2f}" for k in ("invalid_tool_call", "argument_mismatch", "recovery_failure",
                                                   "missing_tool_call"))
    return (f"{row['step']:>4}  {row['success_rate']:4.2f} |                   {labels} | "
            f"{_kinds(row['active_during']):<24} | {_kinds(row['active_next']):<24} | {rhos:<20} | "
            f"{row['w_mean']:5.3f}+-{row['w_std']:5.3f}  | {row['cue_tokens_mean']:7.1f}"
            + _effect(row.get("cue_effect")))


def _effect(probe) -> str:
    """`` | effect all +.25 [...] ...`` when the step ran the cue-effect probe."""
    if not isinstance(probe, dict) or not probe.get("effects"):
        return ""
    return " | " + short_line(probe["effects"])
