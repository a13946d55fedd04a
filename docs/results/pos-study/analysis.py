"""The declared analysis of PLAN.md, from the study's checkpoints.csv: the sensitivity gate, the
primary endpoint with its decision, the per-seed updates TACO needs, and the secondary family.

    .venv/bin/python docs/results/pos-study/analysis.py docs/results/pos-study/checkpoints.csv

Prints markdown; ``--json FILE`` also writes the numbers. Paired t-tests and Holm's correction
are the comparison's own (taco_fairseq.comparison.statistics), the interpolation the speed-up's
(taco_fairseq.glue.speedup.first_reach).
"""

import argparse
import json
import sys
from pathlib import Path
from typing import Dict, List, Optional

from taco_fairseq.comparison.statistics import PairedTest, holm, paired_test
from taco_fairseq.comparison.tables import read_checkpoints_csv
from taco_fairseq.glue.speedup import first_reach

#: PLAN.md's measure, checkpoints and margin.
GATED = "pos_accuracy_ambiguous"
MLM_LAST, TACO_LAST, EARLY = 20000, 7000, 1000
MARGIN = 0.1
EQUAL_UPDATES = (500, 1000, 1500, 2000, 3000, 4000, 6000, 7000)
SEEDS = (1, 2, 3, 4, 5)


class Study:
    """``checkpoints.csv`` rows as ``values(measure, objective, updates) → {seed: value}``."""

    def __init__(self, rows: List[dict]):
        self.rows = rows

    def values(self, key: str, objective: str, updates: int) -> Dict[int, float]:
        return {r["pretrain_seed"]: r[key] for r in self.rows
                if r["objective"] == objective and r["updates"] == updates
                and r.get(key) is not None}

    def test(self, key: str, candidate, baseline) -> Optional[PairedTest]:
        """``candidate − baseline``, each an (objective, updates) pair, paired by seed."""
        return paired_test(self.values(key, *candidate), self.values(key, *baseline))


def analysed_seeds(study: Study) -> List[int]:
    """The seeds with both endpoints' checkpoints, MLM(20k) and TACO(7k)."""
    return sorted(set(study.values(GATED, "mlm", MLM_LAST))
                  & set(study.values(GATED, "taco", TACO_LAST)))


def gate(study: Study) -> dict:
    """PLAN.md §1: MLM(20k) above the initialization and above MLM(1k), p < 0.05 each.

    ``evaluated``: both tests could be computed (two seeds or more); ``final``: every declared
    seed is in, so ``passed`` is the gate's verdict (before that, an interim value only)."""
    tests = {"MLM(20k) − init": study.test(GATED, ("mlm", MLM_LAST), ("mlm", 0)),
             "MLM(20k) − MLM(1k)": study.test(GATED, ("mlm", MLM_LAST), ("mlm", EARLY))}
    evaluated = all(t is not None and t.tested for t in tests.values())
    passed = evaluated and all(t.difference > 0 and t.p < 0.05 for t in tests.values())
    final = evaluated and all(t.n == len(SEEDS) for t in tests.values())
    return {"tests": tests, "evaluated": evaluated, "passed": passed, "final": final}


def primary(study: Study) -> dict:
    """PLAN.md §2: D = TACO(7k) − MLM(20k), G = mean of MLM(20k) − init, the decision
    (``final``: on every declared seed; before that an interim value, not reported as one)."""
    d = study.test(GATED, ("taco", TACO_LAST), ("mlm", MLM_LAST))
    g = study.test(GATED, ("mlm", MLM_LAST), ("mlm", 0))
    if d is None or not d.tested or g is None:
        return {"D": d, "G": None, "decision": "not available", "final": False}
    gain = g.difference
    if d.low > -MARGIN * gain:
        decision = "supported" + (" (within the margin; TACO also significantly below MLM's "
                                  "20,000 updates)" if d.high < 0 else "")
    elif d.high < 0:
        decision = "refuted"
    else:
        decision = "inconclusive"
    return {"D": d, "G": gain, "margin": -MARGIN * gain, "decision": decision,
            "final": d.n == len(SEEDS) and g.n == len(SEEDS)}


def speedups(study: Study) -> Dict[int, Optional[float]]:
    """Per seed, the updates TACO needs to reach that seed's MLM(20k) value (interpolated
    between TACO's checkpoints; None: not reached by 7,000)."""
    target = study.values(GATED, "mlm", MLM_LAST)
    reached = {}
    for seed, value in sorted(target.items()):
        curve = sorted((r["updates"], r[GATED]) for r in study.rows
                       if r["objective"] == "taco" and r["pretrain_seed"] == seed
                       and r.get(GATED) is not None)
        if curve:
            reached[seed] = first_reach([u for u, _ in curve], [v for _, v in curve], value)
    return reached


def secondary(study: Study) -> List[dict]:
    """PLAN.md §3: eleven paired tests, Holm-adjusted together (untested ones left out of
    the correction and shown without a verdict)."""
    items = [("pos_accuracy", ("taco", TACO_LAST), ("mlm", MLM_LAST))]
    items += [(GATED, ("taco", u), ("mlm", u)) for u in EQUAL_UPDATES]
    items += [(k, ("taco", TACO_LAST), ("mlm", MLM_LAST))
              for k in ("mlm_loss_wikitext2", "mlm_loss_book")]
    tests = [(key, c, b, study.test(key, c, b)) for key, c, b in items]
    tested = [t for *_, t in tests if t is not None and t.tested]
    adjusted = iter(holm([t.p for t in tested]))
    return [{"measure": key, "candidate": c, "baseline": b, "test": t,
             "holm_p": next(adjusted) if t is not None and t.tested else None}
            for key, c, b, t in tests]


def _gate_status(g: dict) -> str:
    if not g["evaluated"]:
        return "not evaluated yet"
    if not g["final"]:
        n = min(t.n for t in g["tests"].values())
        return (f"{'passed' if g['passed'] else 'not passed'} with {n} of {len(SEEDS)} seeds "
                "(interim, no verdict)")
    return "passed" if g["passed"] else "failed"


def _row(label: str, t: Optional[PairedTest], extra: str = "") -> str:
    if t is None or not t.tested:
        return f"| {label} | {t.n if t else 0} | | | | | {extra or 'not tested'} |"
    return (f"| {label} | {t.n} | {t.difference:+.2f} | [{t.low:+.2f}, {t.high:+.2f}] | "
            f"{t.p:.3g} | {extra} |")


def report(study: Study) -> str:
    g, p, s = gate(study), primary(study), secondary(study)
    header = "| comparison | n | difference | 95% t-interval | p | |"
    rule = "|---|---|---|---|---|---|"
    lines = [f"## Sensitivity gate ({GATED}, points)", "", header, rule,
             *(_row(k, t) for k, t in g["tests"].items()), "",
             "Gate: **" + _gate_status(g) + "**.", "",
             "## Primary endpoint", "", header, rule, _row(
                 f"TACO({TACO_LAST}) − MLM({MLM_LAST})", p["D"]), ""]
    analysed = analysed_seeds(study)
    if not g["evaluated"]:
        lines.append("Not available yet: the gate needs MLM's 20,000-update checkpoint of two "
                     "seeds or more.")
    elif not g["final"] or (g["passed"] and not p["final"]):
        lines.append(f"Interim ({len(analysed)} of {len(SEEDS)} seeds): the gate and the "
                     "decision are made on every declared seed (PLAN.md); none is made yet.")
    elif not g["passed"]:
        lines.append("The gate failed: the measure does not see MLM's pre-training; no TACO "
                     "claim is made from it (PLAN.md §1).")
    elif p["G"] is None:
        lines.append("Not available yet.")
    else:
        lines.append(f"G = {p['G']:.2f} points, margin −0.1 × G = {p['margin']:.2f}: "
                     f"**{p['decision']}**.")
    lines += ["", "Per seed, updates TACO needs to reach MLM(20k) (interpolated; description):",
              ""]
    for seed, reached in speedups(study).items():
        lines.append(f"- seed {seed}: " + ("not reached by 7,000" if reached is None else
                                           f"{reached:.0f} ({MLM_LAST / reached:.1f}×)"))
    lines += ["", "## Secondary (Holm over the family)", "",
              "| measure | comparison | n | difference | 95% t-interval | p | Holm p |",
              "|---|---|---|---|---|---|---|"]
    for item in s:
        t, label = item["test"], (f"{item['candidate'][0]}({item['candidate'][1]}) − "
                                  f"{item['baseline'][0]}({item['baseline'][1]})")
        if t is None or not t.tested:
            lines.append(f"| {item['measure']} | {label} | {t.n if t else 0} | | | | |")
        else:
            lines.append(f"| {item['measure']} | {label} | {t.n} | {t.difference:+.3f} | "
                         f"[{t.low:+.3f}, {t.high:+.3f}] | {t.p:.3g} | {item['holm_p']:.3g} |")
    lines += ["", f"Seeds analysed: {analysed} of the declared {list(SEEDS)}"
              + ("." if len(analysed) == len(SEEDS) else
                 " (interim: no verdict is final before every declared seed, PLAN.md).")]
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoints", type=Path, help="the study's checkpoints.csv")
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    args = parser.parse_args(argv)
    study = Study(read_checkpoints_csv(args.checkpoints))
    print(report(study))
    if args.json:
        numbers = {"gate": gate(study), "primary": primary(study),
                   "speedups": speedups(study), "secondary": secondary(study)}
        args.json.write_text(json.dumps(numbers, default=lambda o: o.__dict__, indent=2) + "\n")


if __name__ == "__main__":
    sys.exit(main())
