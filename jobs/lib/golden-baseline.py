#!/usr/bin/env python3
"""Writes a baseline file with golden tokens from a run's questions.jsonl.

Usage: jobs/lib/golden-baseline.py QUESTIONS.jsonl OUT.json "DESCRIPTION"

The baseline pins every question's greedy token ids (eval/baseline.h, "golden") and the run's
accuracy with an absolute tolerance of 0, so any flipped token or lost answer is a regression.
jobs/baselines/quickstart-tiny.json is made this way from jobs/quickstart.sh's artifacts
(docs/ENGINE.md, "Golden tokens"). One golden completion per line keeps diffs readable.
"""
import json
import sys

if len(sys.argv) != 4:
    sys.exit(__doc__)
rows = sorted((json.loads(line) for line in open(sys.argv[1]) if line.strip()),
              key=lambda r: r["id"])
head = {
    "description": sys.argv[3],
    "benchmark": "gsm8k",
    "num_questions": len(rows),
    "accuracy": sum(bool(r["correct"]) for r in rows) / len(rows),
    "tolerance": {"mode": "absolute", "value": 0.0},
}
lines = ["{"] + [" %s: %s," % (json.dumps(k), json.dumps(v)) for k, v in head.items()]
golden = [json.dumps({"id": r["id"], "token_ids": r["token_ids"]}) for r in rows]
lines += [' "golden": ['] + ["  " + g + ("," if i + 1 < len(golden) else "")
                             for i, g in enumerate(golden)] + [" ]", "}"]
with open(sys.argv[2], "w") as out:
    out.write("\n".join(lines) + "\n")
print(f"{sys.argv[2]}: {len(rows)} golden completions, accuracy {head['accuracy']:.3f}")
