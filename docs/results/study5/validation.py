"""Write the validation masked-LM loss (bits per masked token) of every control's pre-training
runs over updates, from their fairseq logs, to controls/validation.csv beside this file. The
rows of a control whose runs are not under OUT (a run directory lost with an earlier session's
machine) are kept from the file as it was.

    .venv/bin/python docs/results/study5/validation.py [OUT]   # OUT: run.sh's (default /work/study)
"""
import csv
import sys
from pathlib import Path

from taco_fairseq.comparison.pretraining import validation_losses

out = Path(sys.argv[1] if len(sys.argv) > 1 else "/work/study")
rows = []
for run_dir in sorted((out / "controls").glob("*/pretrain/*-seed*")):
    control, objective = run_dir.parts[-3], run_dir.name.rsplit("-seed", 1)
    for updates, loss in sorted(validation_losses(run_dir).items()):
        rows.append((control, objective[0], objective[1], updates, f"{loss:.3f}"))
target = Path(__file__).parent / "controls" / "validation.csv"
measured = {row[0] for row in rows}
if target.is_file():
    with open(target, newline="") as f:
        kept = [tuple(r.values()) for r in csv.DictReader(f) if r["control"] not in measured]
    rows = sorted(kept + rows, key=lambda r: (r[0], r[1], int(r[2]), int(r[3])))
with open(target, "w", newline="") as f:
    writer = csv.writer(f)
    writer.writerow(["control", "objective", "pretrain_seed", "updates", "valid_mlm_loss"])
    writer.writerows(rows)
print(f"wrote {len(rows)} rows to {target}")
