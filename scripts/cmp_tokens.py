#!/usr/bin/env python3
"""Greedy tokens of two `qasr transcribe --format json` outputs: how many, where they first differ, and the largest
log-probability difference over the common prefix. Used by the GPU A/B scripts (cuda_ab.sh, cuda_bin_ab.sh).
   python3 scripts/cmp_tokens.py REFERENCE.json OTHER.json"""
import json
import sys


def tokens(path):
    j = json.load(open(path))
    j = j[0] if isinstance(j, list) else j
    return [(t['id'], t['logprob']) for t in j['tokens']]


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    a, b = tokens(sys.argv[1]), tokens(sys.argv[2])
    first = next((i for i, (x, y) in enumerate(zip(a, b)) if x[0] != y[0]), None)
    dlp = max((abs(x[1] - y[1]) for x, y in zip(a, b)), default=0.0)
    print('%d/%d tokens, first difference at %s, max |dlogprob| %.2e' % (len(b), len(a), first, dlp))


if __name__ == '__main__':
    main()
