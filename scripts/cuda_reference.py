#!/usr/bin/env python3
"""qasr's CUDA backend against the reference (transformers, bf16) on the GPU machine: accuracy and speed.

  python3 scripts/cuda_reference.py --model DIR --audio WAV --qasr build/tools/qasr [--steps 64] [--tokens 40]
                                    [--runs 10] [--attn sdpa] [--out result.json]

Accuracy: `qasr dev logits --device cuda` gives the prefill argmax at every prompt position and 64 forced greedy
steps (plain argmax, EOS ignored) with top-2 margins; the reference computes the same in bf16 from the same
prompt ids (qasr's prompt builder is checked against transformers in the fp32 parity suite). Reported: argmax
agreement over the prefill positions, the first divergence of the forced sequences and the margins there.
Speed: the reference end to end (feature extraction + generate with exactly --tokens new tokens, greedy), timed
with CUDA synchronisation, median of --runs after 2 warm-ups. qasr's own timing comes from `qasr bench`.
"""
import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference import read_wav  # noqa: E402  (16 kHz mono 16-bit PCM, as the parity dumps read it)
from bf16_common import argmax_ties, feature_extractor, forced_greedy, load_reference, prefill, qasr_logits, resolved  # noqa: E402
from bf16_common import features as clip_features  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--audio", required=True)
    ap.add_argument("--qasr", required=True)
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=40)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--attn", default="sdpa")
    ap.add_argument("--skip-accuracy", action="store_true")
    ap.add_argument("--skip-speed", action="store_true")
    ap.add_argument("--fp32-check", action="store_true",
                    help="also run the reference in fp32 (TF32 off) and report how often bf16 reference, fp32 "
                         "reference and qasr agree on the prefill argmax")
    ap.add_argument("--out")
    a = ap.parse_args()

    import torch
    dev = "cuda"
    res = {"model": a.model, "audio": a.audio, "attn": a.attn}
    t0 = time.perf_counter()
    model = load_reference(a.model, torch.bfloat16, a.attn, dev)
    res["reference_load_s"] = time.perf_counter() - t0
    fe = feature_extractor()
    pcm = read_wav(a.audio)

    def features():
        return clip_features(fe, pcm, dev, model.dtype)

    q = qasr_logits(a.qasr, a.model, a.audio, a.steps)
    ids = q["prompt_ids"]
    L = len(ids)
    input_ids = torch.tensor([ids], device=dev)
    if not a.skip_accuracy:
        x, mask = features()
        head_in = []
        hook = model.get_output_embeddings().register_forward_hook(lambda m, i, o: head_in.append(i[0].detach()))
        out = prefill(model, ids, x, mask, cache=True)
        hook.remove()
        lg = out.logits[0].float()
        # the same head input with float32 logits (the bf16 reference's logits are bf16: equal top values are
        # common on random weights, and argmax then takes the lower id)
        with torch.no_grad():
            lg32 = head_in[0][0].float() @ model.get_output_embeddings().weight.float().t()
        ref_arg32 = lg32.argmax(-1).tolist()
        t4 = lg.topk(4, dim=-1)
        ref_top = [[[int(i), float(v)] for i, v in zip(ix, vs)] for ix, vs in zip(t4.indices.tolist(), t4.values.tolist())]
        del lg32, head_in
        ref_arg, ref_tie = argmax_ties(lg)
        ref_margin = [t[0][1] - t[1][1] for t in ref_top]
        seq, margins = forced_greedy(model, out, L, a.steps)
        agree = sum(int(r == o) for r, o in zip(ref_arg, q["prefill_argmax"]))
        disagree_margins = [min(ref_margin[i], q["prefill_margin"][i]) for i in range(L)
                            if ref_arg[i] != q["prefill_argmax"][i]]
        div = next((i for i, (r, o) in enumerate(zip(seq, q["forced_ids"])) if r != o), None)
        res.update(prompt_len=L, prefill_argmax_agreement=agree / L, prefill_agree=agree,
                   prefill_disagreement_max_margin=max(disagree_margins) if disagree_margins else None,
                   forced_steps=a.steps, forced_identical=div is None, forced_first_divergence=div,
                   forced_margin_at_divergence_ref=None if div is None else margins[div],
                   forced_margin_at_divergence_qasr=None if div is None else q["forced_margin"][div],
                   forced_min_margin_ref=min(margins))
        # Where the disagreements come from: exact ties among the bf16 reference's logits, and the agreement when
        # both sides' logits are taken at the same precision (qasr's rounded to bf16 with the lowest id on ties;
        # the reference's head recomputed in float32 from its own bf16 head input).
        ties = [i for i in range(L) if ref_tie[i]]
        res_pos = [i for i, r in enumerate(resolved(lg)) if r]
        res.update(ref_resolved_positions=len(res_pos),
                   prefill_agree_resolved=sum(int(ref_arg[i] == q["prefill_argmax"][i]) for i in res_pos))
        qb = q.get("prefill_argmax_bf16")
        if qb is not None:
            res.update(prefill_agree_bf16_logits=sum(int(r == o) for r, o in zip(ref_arg, qb)) / L)
        res.update(ref_bf16_top2_ties=len(ties),
                   prefill_agree_ref_f32_logits=sum(int(r == o) for r, o in zip(ref_arg32, q["prefill_argmax"])) / L,
                   ref_bf16_vs_ref_f32_logits=sum(int(r == o) for r, o in zip(ref_arg, ref_arg32)) / L,
                   disagreements=[{"pos": i, "ref_top": ref_top[i], "ref_f32_logits_argmax": ref_arg32[i],
                                   "qasr_top": q["prefill_top"][i] if "prefill_top" in q else None,
                                   "qasr_bf16_argmax": qb[i] if qb else None}
                                  for i in range(L) if ref_arg[i] != q["prefill_argmax"][i]])
        print(f"accuracy detail: the bf16 reference's top-2 logits are equal at {len(ties)}/{L} positions; "
              f"qasr's logits rounded to bf16 agree at {100 * res.get('prefill_agree_bf16_logits', float('nan')):.2f}%; "
              f"the reference's head in float32 agrees with qasr at {100 * res['prefill_agree_ref_f32_logits']:.2f}% "
              f"and with its own bf16 logits at {100 * res['ref_bf16_vs_ref_f32_logits']:.2f}%", flush=True)
        print(f"accuracy where the bf16 reference's top-2 logits are more than one bf16 step apart: "
              f"{res['prefill_agree_resolved']}/{len(res_pos)}", flush=True)
        for d in res["disagreements"]:
            print(f"  disagreement at {d['pos']}: reference top {d['ref_top'][:3]} (f32-logit argmax "
                  f"{d['ref_f32_logits_argmax']}), qasr top {(d['qasr_top'] or [])[:3]} (bf16-logit argmax "
                  f"{d['qasr_bf16_argmax']})", flush=True)
        print(f"accuracy: prefill argmax agreement {agree}/{L} = {100.0 * agree / L:.2f}%"
              f" (largest top-2 gap at a disagreement: {res['prefill_disagreement_max_margin']}); "
              f"forced greedy {'identical over %d steps' % a.steps if div is None else 'diverges at step %d (top-2 gap ref %.4f, qasr %.4f)' % (div, margins[div], q['forced_margin'][div])}",
              flush=True)

    if a.fp32_check and not a.skip_accuracy:
        m32 = load_reference(a.model, torch.float32, "eager", dev)
        x32, m32mask = clip_features(fe, pcm, dev, torch.float32)
        o32 = prefill(m32, ids, x32, m32mask)
        a32 = o32.logits[0].float().argmax(-1).tolist()
        del m32, o32
        torch.cuda.empty_cache()
        res.update(qasr_vs_fp32=sum(int(x == y) for x, y in zip(a32, q["prefill_argmax"])) / L,
                   bf16ref_vs_fp32=sum(int(x == y) for x, y in zip(a32, ref_arg)) / L)
        print(f"fp32 reference: qasr (CUDA) agrees on {100 * res['qasr_vs_fp32']:.2f}% of the prefill positions, "
              f"the bf16 reference on {100 * res['bf16ref_vs_fp32']:.2f}%", flush=True)
        # The bf16 noise floor: the same reference in bf16 with the other attention implementation (eager vs the
        # default), i.e. how often two bf16 runs of transformers itself agree on these near-tie logits.
        other = "eager" if a.attn != "eager" else "sdpa"
        mo = load_reference(a.model, torch.bfloat16, other, dev)
        oo = prefill(mo, ids, *features())
        ao, otie = argmax_ties(oo.logits[0].float())
        res["bf16_other_top2_ties"] = sum(otie)
        del mo, oo
        torch.cuda.empty_cache()
        res.update(bf16_other_attn=other, bf16_other_vs_bf16ref=sum(int(x == y) for x, y in zip(ao, ref_arg)) / L,
                   bf16_other_vs_fp32=sum(int(x == y) for x, y in zip(ao, a32)) / L,
                   qasr_vs_bf16_other=sum(int(x == y) for x, y in zip(ao, q["prefill_argmax"])) / L)
        print(f"bf16 noise floor: the reference in bf16 with {other} attention agrees with the bf16 {a.attn} reference on "
              f"{100 * res['bf16_other_vs_bf16ref']:.2f}% of the prefill positions (with fp32: "
              f"{100 * res['bf16_other_vs_fp32']:.2f}%, with qasr: {100 * res['qasr_vs_bf16_other']:.2f}%; its top-2 logits "
              f"equal at {res['bf16_other_top2_ties']} positions)", flush=True)

    if a.skip_speed:
        if a.out:
            with open(a.out, "w") as f:
                json.dump(res, f, indent=1)
        return
    # Speed: end to end as a user calls it (features on the CPU, generate on the GPU), fixed decode length.
    def e2e():
        torch.cuda.synchronize()
        t = time.perf_counter()
        x, mask = features()
        with torch.no_grad():
            g = model.generate(input_ids=input_ids, input_features=x, input_features_mask=mask,
                               attention_mask=torch.ones_like(input_ids), max_new_tokens=a.tokens,
                               min_new_tokens=a.tokens, do_sample=False)
        torch.cuda.synchronize()
        assert g.shape[1] - L == a.tokens, g.shape
        return (time.perf_counter() - t) * 1000.0
    for _ in range(2):
        e2e()
    times = [e2e() for _ in range(a.runs)]
    res.update(reference_e2e_ms_median=statistics.median(times), reference_e2e_ms_min=min(times),
               reference_tokens=a.tokens, reference_torch=torch.__version__)
    import transformers
    res["reference_transformers"] = transformers.__version__
    print(f"reference ({a.attn}, bf16) end to end: median {statistics.median(times):.1f} ms, min {min(times):.1f} ms "
          f"({a.tokens} tokens, {len(pcm) / 16000:.2f} s audio, {a.runs} runs)", flush=True)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
