#!/usr/bin/env python3
"""Compares the top-5 log-probabilities of two golden-format files (same model,
same prompts): share within 1e-3, median and worst deviation, over the
log-probs of tokens both files list at a step (where the two continuations
part, later steps compare different contexts).
Usage: compare_golden.py A.json B.json"""
import json
import sys

a, b = (json.load(open(p)) for p in sys.argv[1:3])
devs = []
for case_a, case_b in zip(a['cases'], b['cases']):
    for step_a, step_b in zip(case_a['steps'], case_b['steps']):
        other = {t[0]: t[2] for t in step_b['top']}
        devs += [abs(t[2] - other[t[0]]) for t in step_a['top'] if t[0] in other]
devs.sort()
within = sum(d <= 1e-3 for d in devs) / len(devs)
print(f'{len(devs)} log-probs: {100 * within:.1f}% within 1e-3, '
      f'median {devs[len(devs) // 2]:.1e}, worst {devs[-1]:.1e}')
