#!/usr/bin/env python3
"""How well `qasr transcribe -pp` tracks the time: runs the command, stamps each "progress N %" line of stderr with
its arrival, and compares the reported fraction with the fraction of the wall time gone (from the 0 % line to the
100 % one). Prints one row per line and the largest gap (docs/benchmarks.md "Progress").
  python3 scripts/progress_track.py qasr transcribe -m MODEL -pp AUDIO [options]
"""
import re
import subprocess
import sys
import time


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    p = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    seen = []  # (seconds, percent)
    for line in p.stderr:
        m = re.search(r": progress (\d+) %$", line.rstrip("\n"))
        if m:
            seen.append((time.monotonic(), int(m.group(1))))
        elif line.startswith("qasr: audio"):
            print(line.rstrip())
    if p.wait() != 0 or len(seen) < 2 or seen[-1][1] != 100:
        sys.exit(f"the command failed or printed no progress to 100 % (rc {p.returncode})")
    t0, t1 = seen[0][0], seen[-1][0]
    worst = 0.0
    print("  elapsed s  reported %  time gone %")
    for t, pct in seen:
        gone = 100.0 * (t - t0) / (t1 - t0)
        worst = max(worst, abs(gone - pct))
        print(f"  {t - t0:9.2f}  {pct:10d}  {gone:11.1f}")
    print(f"largest gap between the reported and the time gone: {worst:.1f} points over {t1 - t0:.2f} s")


if __name__ == "__main__":
    main()
