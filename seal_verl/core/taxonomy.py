"""The SEAL failure taxonomy: the turn labels, the order in which Psi's rules fire, and default utilities.

Everything that names a label imports it from here, so a typo is an import error rather than a silent
zero weight. The module is pure data: no verl, no BFCL.
"""

from __future__ import annotations

INVALID_TOOL_CALL = "invalid_tool_call"
ARGUMENT_MISMATCH = "argument_mismatch"
STATE_MISMATCH = "state_mismatch"
RECOVERY_FAILURE = "recovery_failure"
MISSING_TOOL_CALL = "missing_tool_call"
RESPONSE_MISMATCH = "response_mismatch"
PASS = "pass"
SPURIOUS_TOOL_CALL = "spurious_tool_call"
CHECKER_ERROR = "checker_error"

#: Rules 1-7 of Psi for turns whose ground truth calls something; the first rule that matches wins.
PRIORITY: tuple[str, ...] = (
    INVALID_TOOL_CALL,
    ARGUMENT_MISMATCH,
    STATE_MISMATCH,
    RECOVERY_FAILURE,
    MISSING_TOOL_CALL,
    RESPONSE_MISMATCH,
    PASS,
)

#: The only labels an abstention turn (empty ground truth) can carry.
ABSTENTION_LABELS: tuple[str, ...] = (SPURIOUS_TOOL_CALL, PASS)

#: Every label Psi can emit.
LABELS: tuple[str, ...] = PRIORITY + (SPURIOUS_TOOL_CALL, CHECKER_ERROR)

#: Labels that describe a failure of the agent (``checker_error`` is a failure of the verifier, not the agent).
FAILURE_LABELS: tuple[str, ...] = tuple(l for l in LABELS if l not in (PASS, CHECKER_ERROR))

#: A ``pass`` on an abstention turn is kept apart in profiles: the reference utilities value a correct
#: abstention differently from an ordinary passing turn.
CORRECT_ABSTENTION = "correct_abstention"

#: The keys of a trajectory profile p_j(z) and of rho. ``checker_error`` turns are excluded from profiles.
PROFILE_KEYS: tuple[str, ...] = tuple(l for l in LABELS if l != CHECKER_ERROR) + (CORRECT_ABSTENTION,)

#: Default utilities rho(z).
#:
#: Taken from the SEAL paper's utility table (Appendix C.2, Table 6), mapped from the reference code's tag
#: names onto the labels here: spurious_tool_call 2.0, correct abstention 1.8, empty turn -> missing_tool_call
#: 1.5, state_mismatch 1.0, response_mismatch 0.9, pass 1.0.
#:
#: The table has no entry for three labels; the values chosen here and why:
#: - recovery_failure 1.3: the agent saw an error and did not act on it. This is the behaviour the error
#:   feedback cues teach, so it sits between an outright missing call (1.5) and a wrong state (1.0).
#: - invalid_tool_call 1.2 and argument_mismatch 1.2: format and schema errors are the cheapest failures to
#:   fix and the environment side already cues them; a mild emphasis avoids letting the policy gradient be
#:   dominated by them while still weighting them above an ordinary failing turn.
DEFAULT_RHO: dict[str, float] = {
    INVALID_TOOL_CALL: 1.2,
    ARGUMENT_MISMATCH: 1.2,
    STATE_MISMATCH: 1.0,
    RECOVERY_FAILURE: 1.3,
    MISSING_TOOL_CALL: 1.5,
    RESPONSE_MISMATCH: 0.9,
    PASS: 1.0,
    SPURIOUS_TOOL_CALL: 2.0,
    CORRECT_ABSTENTION: 1.8,
}

#: Allowed range of a single utility value; values outside are rejected at start-up.
RHO_MIN, RHO_MAX = 0.0, 10.0


def check_label(label: str) -> str:
    """Return ``label`` if it is a known label, else raise ``ValueError`` naming the known ones."""
    if label not in LABELS:
        raise ValueError(f"unknown SEAL label {label!r}; known labels: {', '.join(LABELS)}")
    return label


def check_rho(rho: dict[str, float]) -> dict[str, float]:
    """Validate a utility table: known keys only, finite values in [RHO_MIN, RHO_MAX]. Missing keys keep defaults."""
    out = dict(DEFAULT_RHO)
    for key, value in dict(rho).items():
        if key not in PROFILE_KEYS:
            raise ValueError(f"unknown key {key!r} in rho; allowed keys: {', '.join(PROFILE_KEYS)}")
        try:
            v = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"rho[{key!r}] must be a number, got {value!r}") from None
        if not (RHO_MIN <= v <= RHO_MAX):
            raise ValueError(f"rho[{key!r}]={v} is outside the allowed range [{RHO_MIN}, {RHO_MAX}]")
        out[key] = v
    return out
