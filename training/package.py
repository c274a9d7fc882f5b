#!/usr/bin/env python3
"""Install a device run's results into the repository (run here, on the CPU machine).

    python3 training/package.py RUNDIR STAGE_NAME

RUNDIR holds what run_device.sh put in $OUT: model.safetensors.part*, meta.tar.gz, wav.tar, *.log.
Writes models/demo/ (model + configs + expected.tsv), samples/demo_{en,de}.{wav,txt,ref.txt},
tests/data/demo_testset/ (WAV subset, subset.tsv, testset.tsv) and training/results/STAGE_NAME/ (reports, logs).
Expected transcripts are transformers' greedy single-clip fp32 CPU outputs (no batch padding).
"""
import csv
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "training"))
import sentences  # noqa: E402

# the bundled demo clips: clean renderings (default voice, no augmentation) of held-out test sentences
SAMPLES = {"en": "sample-en-2", "de": "sample-de-1"}


def parse(raw):
    s = raw.strip()
    if "<asr_text>" not in s:
        return "", s
    meta, text = s.split("<asr_text>", 1)
    lang = ""
    for line in meta.splitlines():
        if line.strip().lower().startswith("language "):
            v = line.strip()[9:].strip()
            lang = v[:1].upper() + v[1:].lower()
            break
    if "language none" in meta.lower():
        lang = ""
    return lang, text.strip()


def read_tsv(path):
    with open(path, encoding="utf-8") as f:
        return list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))


def main():
    run, stage = sys.argv[1], sys.argv[2]
    tmp = os.path.join("/tmp", f"qasr_pkg_{stage}")
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    with tarfile.open(os.path.join(run, "meta.tar.gz")) as t:
        t.extractall(tmp)
    with tarfile.open(os.path.join(run, "wav.tar")) as t:
        t.extractall(tmp)
    # model
    md = os.path.join(ROOT, "models", "demo")
    os.makedirs(md, exist_ok=True)
    parts = sorted(p for p in os.listdir(run) if p.startswith("model.safetensors.part"))
    with open(os.path.join(md, "model.safetensors"), "wb") as f:
        for p in parts:
            f.write(open(os.path.join(run, p), "rb").read())
    for fn in ["config.json", "generation_config.json", "preprocessor_config.json"]:
        shutil.copy(os.path.join(tmp, "model", fn), md)
    sha = hashlib.sha256(open(os.path.join(md, "model.safetensors"), "rb").read()).hexdigest()
    # results
    rd = os.path.join(ROOT, "training", "results", stage)
    os.makedirs(rd, exist_ok=True)
    for fn in os.listdir(os.path.join(tmp, "eval")):
        shutil.copy(os.path.join(tmp, "eval", fn), rd)
    shutil.copy(os.path.join(tmp, "model", "train_log.json"), rd)
    for fn in ["run.log", "train.log", "eval.log"]:
        if os.path.exists(os.path.join(run, fn)):
            shutil.copy(os.path.join(run, fn), rd)
    with open(os.path.join(rd, "model.sha256"), "w") as f:
        f.write(f"{sha}  models/demo/model.safetensors\n")
    # held-out test subset
    td = os.path.join(ROOT, "tests", "data", "demo_testset")
    shutil.rmtree(td, ignore_errors=True)
    os.makedirs(td)
    shutil.copy(os.path.join(tmp, "data", "test.tsv"), os.path.join(td, "testset.tsv"))
    test_rows = {r["id"]: r for r in read_tsv(os.path.join(tmp, "data", "test.tsv"))}
    sample_rows = {r["id"]: r for r in read_tsv(os.path.join(tmp, "data", "samples.tsv"))}
    hyp = {r["id"]: r for r in read_tsv(os.path.join(tmp, "eval", "hyps_cpu_fp32_single.tsv"))}
    hyp_s = {r["id"]: r for r in read_tsv(os.path.join(tmp, "eval", "hyps_extra_cpu_fp32_single.tsv"))}
    exp = []
    with open(os.path.join(td, "subset.tsv"), "w", encoding="utf-8") as f:
        f.write("path\tlang\tvoice\trate\tpitch\tseconds\treference\n")
        for cid in sorted(hyp, key=lambda c: (c.split("-")[1] != "en", c)):
            r = test_rows[cid]
            path = f"tests/data/demo_testset/{cid}.wav"
            shutil.copy(os.path.join(tmp, "wav", f"{cid}.wav"), os.path.join(ROOT, path))
            f.write(f"{path}\t{r['lang']}\t{r['voice']}\t{r['rate']}\t{r['pitch']}\t{r['seconds']}\t{r['text']}\n")
            exp.append((path, hyp[cid]["raw"], r["text"]))
    # samples
    sd = os.path.join(ROOT, "samples")
    os.makedirs(sd, exist_ok=True)
    for lang, sid in SAMPLES.items():
        path = f"samples/demo_{lang}.wav"
        shutil.copy(os.path.join(tmp, "wav", f"{sid}.wav"), os.path.join(ROOT, path))
        raw = hyp_s[sid]["raw"]
        with open(os.path.join(sd, f"demo_{lang}.txt"), "w", encoding="utf-8") as f:
            f.write(parse(raw)[1] + "\n")
        with open(os.path.join(sd, f"demo_{lang}.ref.txt"), "w", encoding="utf-8") as f:
            f.write(sample_rows[sid]["text"] + "\n")
        exp.insert(0 if lang == "en" else 1, (path, raw, sample_rows[sid]["text"]))
    with open(os.path.join(md, "expected.tsv"), "w", encoding="utf-8") as f:
        f.write("path\tlanguage\ttext\traw\treference\n")
        for path, raw, ref in exp:
            lang, text = parse(raw)
            f.write(f"{path}\t{lang}\t{text}\t{raw}\t{ref}\n")
    rep = json.load(open(os.path.join(rd, "report.json")))
    print(json.dumps({k: v for k, v in rep.items() if k != "subset_ids"}, indent=1))
    print("sha256", sha)
    subprocess.run(["du", "-sh", md, td, sd])


if __name__ == "__main__":
    main()
