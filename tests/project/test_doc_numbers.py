"""The numbers of README.md and docs/benchmarks.md agree with the files they come from.

- The cue effect at the warm start (docs/benchmarks.md): every paired and unpaired interval of its table, and the
  rewards beside it, recomputed from the rewards ``recipes/ledger_cpu/cue_effect.json`` holds.
- The shipped ledger warm start (``recipes/ledger_cpu/model/warm_start.json``): its held-out score (0.305), the share
  of held-out turns that pass and its label mix, wherever the docs quote them; the warm start's training reward
  (the measurement's no-cue rewards) likewise.
- The learning benchmark: its summary table follows from its per-seed table (means, standard deviations, seed
  counts, the differences to GRPO and their t intervals), and the claims of the reading and of the README that
  count seeds or probes follow from the tables.
- ``make run``'s table and the README's range over seeds 1-5.

The learning runs themselves are not shipped (``make bench-learning`` regenerates them); what can be checked is
that each doc says what its own tables say. A changed number in a doc or in a shipped file fails here.
"""

from __future__ import annotations

import json
import os
import re
import statistics

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BENCH = os.path.join(REPO, "docs", "benchmarks.md")
README = os.path.join(REPO, "README.md")
LEDGER = os.path.join(REPO, "recipes", "ledger_cpu")
NEAR_MISS = 0.5  # the ledger run's near-miss credit (recipes/ledger_cpu/config/learn/ledger.yaml)

#: two-sided 95% quantiles of Student's t (tables), for the intervals over five seeds
T975 = {4: 2.776445}


def _text(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def _flat(text: str) -> str:
    return " ".join(text.split())


def _section(text: str, heading: str) -> str:
    start = text.index(heading)
    nxt = re.search(r"\n#{1,3} ", text[start + len(heading):])
    return text[start: start + len(heading) + (nxt.start() if nxt else len(text))]


def _tables(text: str) -> list[list[list[str]]]:
    """Every Markdown table of ``text``: rows of cells, the separator row left out."""
    out, cur = [], []
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not all(re.fullmatch(r"-+", c) for c in cells):
                cur.append(cells)
        elif cur:
            out.append(cur)
            cur = []
    return out


def _table_with(text: str, first_header: str, second_header: str) -> list[list[str]]:
    for t in _tables(text):
        if t[0][0] == first_header and t[0][1] == second_header:
            return t
    raise AssertionError(f"no table with headers {first_header!r}, {second_header!r}")


_EFFECT = re.compile(r"([+-]\d\.\d{3}) \[([+-]\d\.\d{3}), ([+-]\d\.\d{3})\]")


def _close(doc: float, value: float, decimals: int = 3) -> bool:
    return abs(doc - value) <= 0.5 * 10 ** -decimals + 1e-9


# ------------------------------------------------------------------------------------ the shipped measurements


@pytest.fixture(scope="module")
def measurement():
    from seal_verl import rollouts as dr
    from seal_verl.models.warm_start import cue_reading as CR

    result = json.loads(_text(os.path.join(LEDGER, "cue_effect.json")))
    return result, CR.recomputed(result, dr.environment("ledger").task_ids("train"))


@pytest.fixture(scope="module")
def warm_start():
    record = json.loads(_text(os.path.join(LEDGER, "model", "warm_start.json")))
    credit = {"pass": 1.0, "argument_mismatch": NEAR_MISS}
    scores, turns = [], []
    for v in record["heldout"].values():
        labels = v["labels"][0]
        scores.append(sum(credit.get(z, 0.0) for z in labels) / len(labels))
        turns += labels
    sampled = [z for v in record["pass_rates"].values() for labels in v["labels"] for z in labels]
    return {"score": statistics.fmean(scores), "turns_passing": turns.count("pass") / len(turns),
            "mix": {z: sampled.count(z) / len(sampled) for z in set(sampled)}, "sampled_turns": len(sampled)}


def test_the_warm_start_cue_effect_table_is_the_shipped_measurements(measurement):
    result, found = measurement
    section = _section(_text(BENCH), "### The cue effect at the warm start")
    table = _table_with(section, "", "all (every kind vs none)")
    kinds = ["all"] + table[0][2:]
    rows = {r[0]: r[1:] for r in table[1:]}
    assert set(rows) == {"paired", "unpaired"}
    assert set(kinds) == set(found)
    for which, cells in rows.items():
        for kind, cell in zip(kinds, cells):
            diff, lo, hi = map(float, _EFFECT.fullmatch(cell).groups())
            e = found[kind]
            want = (e["lo"], e["hi"]) if which == "paired" else (e["unpaired_lo"], e["unpaired_hi"])
            assert _close(diff, e["diff"]) and _close(lo, want[0]) and _close(hi, want[1]), (which, kind, cell, e)
    with_, without = map(float, re.search(r"reward (\d\.\d{3}) with every kind on, (\d\.\d{3}) with none",
                                          _flat(section)).groups())
    assert _close(with_, found["all"]["with"]) and _close(without, found["all"]["without"])
    # the narrowing the text states
    low, high = map(int, re.search(r"each interval is (\d+)-(\d+)% narrower", _flat(section)).groups())
    shares = [1 - (e["hi"] - e["lo"]) / (e["unpaired_hi"] - e["unpaired_lo"]) for e in found.values()]
    assert round(100 * min(shares)) == low and round(100 * max(shares)) == high, shares


def test_the_warm_starts_training_reward_is_the_measurements(measurement):
    """The learning benchmark's rises are taken from the baseline it quotes (a measurement of its own time), each
    rise is its row's last window minus that baseline, and the page also quotes today's shipped measurement."""
    result, _ = measurement
    none = statistics.fmean(result["values"]["none"])
    bench = _flat(_text(BENCH))
    quoted = re.search(r"warm start's training reward without cues, (\d\.\d{3}) \((\d+) rollouts.*?; (\d\.\d{3}) today\)",
                       bench).groups()
    baseline = float(quoted[0])
    assert _close(float(quoted[2]), none) and int(quoted[1]) == len(result["values"]["none"])
    for rows in _per_seed().values():
        for r in rows.values():
            assert abs(r["rise"] - (r["last"] - baseline)) <= 0.0015, r
    assert f"from the warm start's {baseline:.3f} to" in bench
    assert f"from the warm start's {baseline:.2f} to" in _flat(_text(README))


def test_the_held_out_score_and_label_mix_are_the_shipped_warm_starts(warm_start):
    bench, readme = _flat(_text(BENCH)), _flat(_text(README))
    score = f"{warm_start['score']:.3f}"
    assert score == "0.305"
    assert f"held-out score {score} before any step" in bench and f"rises from {score} to" in bench
    assert f"rises from {score} to" in readme
    m = re.search(r"greedy on the held-out tasks (\d+)% of the turns pass \(score (\d\.\d{3})\)", bench)
    assert int(m.group(1)) == round(100 * warm_start["turns_passing"]) and m.group(2) == score
    mix = re.search(r"\((one sample per training task at temperature 1, (\d+) turns)\): (.*?); greedy", bench)
    assert int(mix.group(2)) == warm_start["sampled_turns"]
    for label, share in re.findall(r"`(\w+)` ([\d.]+)%", mix.group(3)):
        assert abs(float(share) - 100 * warm_start["mix"][label]) <= 0.5, (label, share)
    # the per-seed table starts every run from it (turns passing too)
    table = _table_with(_text(BENCH), "variant", "seed")
    assert all(r[6].startswith(f"{score} -> ") for r in table[1:])
    assert all(r[8].startswith(f"{warm_start['turns_passing']:.3f} -> ") for r in table[1:])


# ------------------------------------------------------------------------------------- the learning benchmark


def _per_seed():
    table = _table_with(_text(BENCH), "variant", "seed")
    out: dict[str, dict[int, dict]] = {}
    for r in table[1:]:
        after = float(r[6].split("->")[1])
        out.setdefault(r[0], {})[int(r[1])] = {"first": float(r[2]), "last": float(r[3]), "rise": float(r[4]),
                                                "window_rise": float(r[5]), "after": after}
    return out


def _interval(diffs: list[float]) -> tuple[float, float, float, int]:
    m = statistics.fmean(diffs)
    half = T975[len(diffs) - 1] * statistics.stdev(diffs) / len(diffs) ** 0.5
    return m, m - half, m + half, sum(d > 0 for d in diffs)


def test_the_learning_summary_follows_from_the_per_seed_rows():
    runs = _per_seed()
    summary = _table_with(_text(BENCH), "variant", "mean rise +- sd over seeds")
    tol = 0.003  # the per-seed rows are rounded to 3 decimals
    for row in summary[1:]:
        variant, rows = row[0], runs[row[0]]
        rises = [r["rise"] for r in rows.values()]
        mean, sd = map(float, re.fullmatch(r"([+-][\d.]+) \+- ([\d.]+)", row[1]).groups())
        assert abs(mean - statistics.fmean(rises)) <= tol and abs(sd - statistics.stdev(rises)) <= tol, row
        # a rise shown as 0.150 may lie just below the goal: the count must lie between the certain and the possible
        met, n = map(int, row[2].split("/"))
        assert sum(x >= 0.1505 for x in rises) <= met <= sum(x >= 0.1495 for x in rises) and n == len(rises), row
        wmean, wsd = map(float, re.fullmatch(r"([+-][\d.]+) \+- ([\d.]+)", row[3]).groups())
        windows = [r["window_rise"] for r in rows.values()]
        assert abs(wmean - statistics.fmean(windows)) <= tol and abs(wsd - statistics.stdev(windows)) <= tol, row
        assert abs(float(row[6]) - statistics.fmean(r["after"] for r in rows.values())) <= tol, row
        if variant == "grpo":
            continue
        grpo = runs["grpo"]
        for cell, key in ((row[4], "last"), (row[5], "after")):
            m, lo, hi, above = _interval([rows[s][key] - grpo[s][key] for s in sorted(rows)])
            doc = re.fullmatch(r"([+-][\d.]+) \[([+-][\d.]+), ([+-][\d.]+)\] \((\d) of (\d) above\)", cell).groups()
            assert abs(float(doc[0]) - m) <= tol and abs(float(doc[1]) - lo) <= 2 * tol, (variant, key, cell)
            assert abs(float(doc[2]) - hi) <= 2 * tol and int(doc[3]) == above and int(doc[4]) == len(rows), cell


def test_the_readings_seed_counts_follow_from_the_tables():
    runs, bench = _per_seed(), _flat(_text(BENCH))
    grpo, cues = runs["grpo"], runs["no_reweighting"]
    lower = sum(cues[s]["after"] < grpo[s]["after"] for s in grpo)
    tie = sum(cues[s]["after"] == grpo[s]["after"] for s in grpo)
    higher = sum(cues[s]["after"] > grpo[s]["after"] for s in grpo)
    assert f"end lower on held-out on {lower} seeds of {len(grpo)} ({tie} tie, {higher} higher;" in bench
    seal = runs["seal"]
    assert f"higher on {sum(seal[s]['after'] > grpo[s]['after'] for s in grpo)} seeds of {len(grpo)}" in bench
    afters = sorted(r["after"] for r in grpo.values())
    assert f"rises from 0.305 to {afters[0]:.2f}-{afters[-1]:.2f} (mean {statistics.fmean(afters):.3f})" in bench
    rises = sorted(r["rise"] for r in seal.values())
    assert f"by {rises[0]:+.3f} to {rises[-1]:+.3f})" in bench


def test_the_probe_counts_in_the_reading_follow_from_the_cue_table():
    table = _table_with(_text(BENCH), "variant", "cue kind")
    rows = {(r[0], r[1]): {"probes": int(r[2]), "mean": float(r[3]), "below": int(r[4]), "above": int(r[5])}
            for r in table[1:]}
    bench = _flat(_text(BENCH))
    seal_all = rows[("seal", "all")]
    assert f"at {seal_all['below']} of {seal_all['probes']} SEAL probes" in bench
    for kind in ("call_format", "tool_affordance", "schema_constraints"):
        r = rows[("seal", kind)]
        assert f"`{kind}` {r['mean']:+.3f}" in bench, kind
    sc = rows[("seal", "schema_constraints")]
    assert f"below zero beyond its interval at {sc['below']} of {sc['probes']} probes (above at {sc['above']})" in bench
    cf = rows[("seal", "call_format")]
    assert f"at {cf['above']} of {cf['probes']} probes, below at {cf['below']}" in bench


def test_make_runs_table_and_the_readmes_range():
    table = _table_with(_text(BENCH), "`make run SEED=`", "held-out before")
    gains = {int(r[0]): float(r[2]) - float(r[1]) for r in table[1:]}
    readme = _flat(_text(README))
    lo, hi = min(gains.values()), max(gains.values())
    assert f"{lo:+.2f} to {hi:+.2f} over seeds 1-{len(gains)}" in readme
    assert f"held out {gains[2]:+.2f} here" in readme
    probes = {int(r[0]): r[4] for r in table[1:]}
    below = int(re.search(r"\((\d+) of 10\)", probes[2]).group(1))
    assert f"below zero beyond its interval at {below})" in readme


def test_the_readme_quotes_the_learning_summary():
    summary = {r[0]: r for r in _table_with(_text(BENCH), "variant", "mean rise +- sd over seeds")[1:]}
    readme = _flat(_text(README))
    held = re.fullmatch(r"([+-][\d.]+) \[([+-][\d.]+), ([+-][\d.]+)\].*", summary["seal"][5]).groups()
    assert f"SEAL ends level with it there ({held[0]}, 95% interval [{held[1]}, {held[2]}]" in readme
    gap = float(summary["seal"][4].split()[0])
    assert f"ends {abs(gap):.2f} below GRPO's" in readme


def test_the_benchmarks_page_stays_within_200_lines():
    assert len(_text(BENCH).splitlines()) <= 200


def test_the_premise_benchmark_table_is_its_kept_runs():
    """docs/benchmarks.md's bench-premise table (SmolLM2 with LoRA) says what the runs kept in bench/results/premise
    hold: per variant and seed the training reward per step, the held-out score and the share of held-out turns
    passing before and after, and the whole interface's effect at each probe."""
    from bench import bench_premise as bp

    [table] = [t for t in _tables(_text(BENCH)) if t[0][:2] == ["variant", "seed"]
               and t[0][2].startswith("training reward, steps 1-")]
    steps = int(table[0][2].split("-")[-1])
    assert len(table) > 1
    for variant, seed, rewards, heldout, passing, effects in table[1:]:
        kept = bp.recorded(variant, int(seed), steps, [])
        assert kept is not None, f"{variant} seed {seed}: no current record of a {steps}-step run"
        c = kept["curve"]
        assert rewards == ", ".join(f"{x['reward']:.2f}" for x in c["steps"]), (variant, seed)
        for doc, values in ((heldout, c["heldout"]), (passing, c["heldout_pass"])):
            assert doc == f"{values['0']:.3f} -> {values[str(steps)]:.3f}", (variant, seed)
        probes = [p["effects"]["all"] for p in c["cue_effect"] if "all" in p["effects"]]
        assert effects == (", ".join(f"{e['diff']:+.2f} [{e['lo']:+.2f}, {e['hi']:+.2f}]" for e in probes) or "-")
