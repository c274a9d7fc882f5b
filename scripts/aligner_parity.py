#!/usr/bin/env python3
"""qasr's forced alignment against reference_aligner.py's dumps: runs `qasr align --format json` on every case of a
manifest and compares the class at every <timestamp> and the words' times (spec 12.3: identical classes at >= 99 %
of positions in bf16, 100 % in fp32; repaired times identical where the raw classes are).

    python3 scripts/aligner_parity.py --manifest DIR/manifest.json --qasr build/tools/qasr --model MODEL_DIR \
        [--device cuda] [--min-agree 1.0] [--out summary.json]

Standard library only. Exit status 1 when the agreement is below --min-agree or a word list differs.
"""
import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--manifest", required=True)
    ap.add_argument("--qasr", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--min-agree", type=float, default=1.0)
    ap.add_argument("--out")
    args = ap.parse_args()
    man = json.load(open(args.manifest))
    total = agree = 0
    cases, ok = [], True
    for c in man["cases"]:
        t0 = time.time()
        p = subprocess.run([args.qasr, "align", "-m", args.model, "--device", args.device, "--format", "json", "-q",
                            "--text", c["text"], os.path.join(ROOT, c["audio"])], capture_output=True, text=True)
        if p.returncode != 0:
            print(f"{c['name']}: qasr failed: {p.stderr.strip()}")
            ok = False
            continue
        q = json.loads(p.stdout)
        words = [w["word"] for w in q["words"]]
        same_words = words == c["words"]
        cls = q["classes"]
        n = min(len(cls), len(c["classes"]))
        diff = [i for i in range(n) if cls[i] != c["classes"][i]]
        margins = [c["margins"][i] for i in diff]
        total += len(c["classes"])
        agree += n - len(diff)
        times_equal = [(w["start"], w["end"]) for w in q["words"]] == \
            [(it["start_time"], it["end_time"]) for it in c["items"]]
        if not same_words or len(cls) != len(c["classes"]) or (not diff and not times_equal):
            ok = False
        r = dict(name=c["name"], positions=len(c["classes"]), differ=len(diff),
                 max_margin_at_difference=max(margins) if margins else None, words_equal=same_words,
                 times_equal=times_equal, seconds=round(time.time() - t0, 2), qasr_rtf=q["rtf"])
        cases.append(r)
        print(json.dumps(r))
    rate = agree / total if total else 0.0
    summary = dict(model=args.model, device=args.device, reference_dtype=man.get("dtype"), positions=total,
                   agree=agree, agreement=rate, ok=ok and rate >= args.min_agree, cases=cases)
    print(f"agreement {agree}/{total} = {100 * rate:.2f} % (needed {100 * args.min_agree:.2f} %)")
    if args.out:
        json.dump(summary, open(args.out, "w"), indent=1)
    sys.exit(0 if summary["ok"] else 1)


if __name__ == "__main__":
    main()
