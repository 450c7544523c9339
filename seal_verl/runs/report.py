"""``seal-verl report``: plots, one self-contained HTML page and the paper-style tables from run folders.

A run folder is what a training run (``seal.run_dir``), ``seal-verl dry-run`` or ``seal-verl eval`` writes:

- training / dry run, read through ``seal_verl.runs.folder``: the config, one row per step (label prevalence
  overall and per category, active cue kinds, rho, the weight statistics, success rate, cue tokens), every
  rollout's weight ``w`` and the validation rollouts (task id and score). Damaged rows are skipped with a
  warning; a file with nothing readable but damage is an error;
- evaluation: ``scores.json`` and ``labels.jsonl``.

Per run it draws label prevalence over steps (overall and per category), the cue kinds active per step, rho
over time, the distribution of w, reward and validation accuracy per category, and cue tokens per rollout;
per eval folder, accuracy and the label mix per category. Several runs give the side-by-side tables in the
form of the paper's Table 1 (accuracy per category and overall, one row per method) and Table 3 (ablations
against full SEAL). Reads files only: no verl, no BFCL import.
"""

from __future__ import annotations

import base64
import html
import os
from collections import defaultdict
from dataclasses import dataclass, field

from seal_verl.atomic import atomic_write_text

from .provenance import report_lines as provenance_lines
from .report_load import ReportError, Run, load_run
from .report_plots import (_plt, plot_comparison, plot_cue_effect, plot_eval, plot_interface, plot_prevalence,
                           plot_weights_reward)
from .report_tables import (CUE_EFFECT_HEADER, TABLE1_HEADER, TABLE3_HEADER, method_label, cue_effect_rows, cue_effects,
                            format_text_table, table1_rows, table3_rows)

__all__ = ["Report", "ReportError", "build_report", "load_run"]


def _html_table(header: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _img(path: str) -> str:
    with open(path, "rb") as f:
        data = base64.b64encode(f.read()).decode("ascii")
    return f'<img alt="{html.escape(os.path.basename(path))}" src="data:image/png;base64,{data}">'


def _safe(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name) or "run"


def _drawn(run: Run, plots: list) -> list[str]:
    """The PNGs of ``plots`` (``(function, path)``) that could be drawn. Numbers that are valid but absurd (a
    weight of 1e308 in a hand-edited row) can make matplotlib fail; that figure is then left out with a warning
    and the rest of the report is written."""
    done = []
    for draw, path in plots:
        try:
            done.append(draw(run, path))
        except (ValueError, OverflowError, ArithmeticError, MemoryError) as exc:
            _plt().close("all")
            run.warnings.append(f"left out {os.path.basename(path)}: matplotlib could not draw it "
                                f"({type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''})")
    return done


@dataclass
class Report:
    html: str
    pngs: list
    text: str
    warnings: list = field(default_factory=list)  # damaged rows skipped, one line each
    notes: list = field(default_factory=list)  # fault injection, retired cue kinds, settings beyond the paper


def build_report(paths: list[str], out: str, names: list[str] | None = None) -> Report:
    """Read the run folders, draw the PNGs into ``out``, write ``out/report.html``; returns what was written."""
    if names and len(names) != len(paths):
        raise ReportError(f"--names gives {len(names)} name(s) for {len(paths)} run folder(s)")
    runs = [load_run(p, names[i] if names else None) for i, p in enumerate(paths)]
    seen: dict = defaultdict(int)
    for r in runs:  # unique names: two folders called "seal" in different places
        seen[r.name] += 1
        if seen[r.name] > 1:
            r.name = f"{r.name}-{seen[r.name]}"
    os.makedirs(out, exist_ok=True)
    pngs, sections = [], []
    for run in runs:
        stem = os.path.join(out, _safe(run.name))
        if run.kind == "eval":
            figs = _drawn(run, [(plot_eval, stem + "_eval.png")])
            detail = f"<p>{html.escape(run.source())}</p>"
        else:
            figs = []
            if run.steps:
                figs = _drawn(run, [(plot_prevalence, stem + "_prevalence.png"),
                                    (plot_interface, stem + "_interface.png"),
                                    (plot_weights_reward, stem + "_weights_reward.png")]
                              + ([(plot_cue_effect, stem + "_cue_effect.png")] if cue_effects(run) else []))
            detail = (f"<p>{len(run.steps)} training step(s), {sum(len(w) for w in run.weights.values())} rollouts; "
                      f"accuracy: {html.escape(run.source())}</p>")
            detail += "<p class='path'>" + "<br>".join(html.escape(x) for x in provenance_lines(run.path)) + "</p>"
        pngs += figs
        said = "".join(f"<li class='note'>{html.escape(n)}</li>" for n in run.notes) + "".join(
            f"<li class='warning'>{html.escape(w)}</li>" for w in run.warnings)
        sections.append(f"<h2>{html.escape(method_label(run))}</h2><p class='path'>{html.escape(run.path)}</p>{detail}"
                        + (f"<ul>{said}</ul>" if said else "") + "".join(f"<figure>{_img(p)}</figure>" for p in figs))
    t1 = table1_rows(runs)
    t3 = table3_rows(runs)
    text = "Table 1 form: accuracy (%) per category\n" + format_text_table(TABLE1_HEADER, t1)
    if any(r[-1].endswith("*") for r in t1):
        text += "\n* mean of the categories present"
    if t3:
        text += "\n\nTable 3 form: ablations against full SEAL\n" + format_text_table(TABLE3_HEADER, t3)
    effect_rows = cue_effect_rows(runs)
    if effect_rows:
        text += ("\n\nCue effect (training reward with minus without, same weights and tasks; last probe)\n"
                 + format_text_table(CUE_EFFECT_HEADER, effect_rows))
    text += "".join(f"\n\nProvenance of {method_label(r)}\n" + "\n".join("  " + x for x in provenance_lines(r.path))
                    for r in runs if r.kind != "eval")
    comparison = ""
    if len(runs) > 1:
        pngs.append(plot_comparison(runs, os.path.join(out, "comparison.png")))
        comparison = f"<figure>{_img(pngs[-1])}</figure>"
    sources = "".join(f"<li>{html.escape(method_label(r))}: {html.escape(r.source())}</li>" for r in runs)
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>seal-verl report</title>
<style>
body {{ font-family: sans-serif; margin: 2em; max-width: 1500px; color: #222; }}
table {{ border-collapse: collapse; margin: 1em 0; }}
th, td {{ border: 1px solid #bbb; padding: 4px 10px; text-align: right; }}
th:first-child, td:first-child {{ text-align: left; }}
th {{ background: #f0f0f0; }}
img {{ max-width: 100%; }}
.path {{ color: #777; font-size: 85%; }}
.note {{ color: #8a4b00; }} .warning {{ color: #a00; }}
</style></head><body>
<h1>seal-verl report</h1>
<h2>Accuracy per category (Table 1 form)</h2>
{_html_table(TABLE1_HEADER, t1)}
<ul>{sources}</ul>
{('<h2>Ablations (Table 3 form)</h2>' + _html_table(TABLE3_HEADER, t3)) if t3 else ''}
{('<h2>Cue effect (last probe)</h2>' + _html_table(CUE_EFFECT_HEADER, effect_rows)) if effect_rows else ''}
{comparison}
{''.join(sections)}
</body></html>
"""
    html_path = os.path.join(out, "report.html")
    atomic_write_text(html_path, page)
    return Report(html=html_path, pngs=pngs, text=text,
                  warnings=[f"{r.name}: {w}" for r in runs for w in r.warnings],
                  notes=[f"{r.name}: {n}" for r in runs for n in r.notes])
