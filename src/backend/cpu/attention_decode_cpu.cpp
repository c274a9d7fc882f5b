// Single-query attention over a range of KV heads (see attention_decode.hpp).
#include "backend/cpu/attention_decode.hpp"

namespace qasr::cpu {

void attend_one(const KernelTable& K, const float* q, const ops::KvView& kv, float* o, int64_t len, int64_t c0,
                int64_t c1, int64_t group, int64_t hd, float scale, float* s) {
    // The kernels walk the positions of one call: of all heads in the range at once where the heads of a position
    // are adjacent (head_stride == hd: one contiguous slice of each cache row), else one call per KV head
    // (head-major cache: each head's positions are one contiguous stream).
    const int64_t hs = kv.head_stride, ps = kv.pos_stride, nh = (c1 - c0) * group;
    const bool joint = hs == hd;
    const auto* kf = static_cast<const float*>(kv.k);
    const auto* vf = static_cast<const float*>(kv.v);
    const auto* kb = static_cast<const uint16_t*>(kv.k);
    const auto* vb = static_cast<const uint16_t*>(kv.v);
    const float* qi = q + c0 * group * hd;
    float* oi = o + c0 * group * hd;
    for (int64_t c = c0; c < c1; c = joint ? c1 : c + 1) {
        const int64_t cn = joint ? c1 - c0 : 1, off = (c - c0) * group;
        if (kv.bf16) K.attn_scores_bf16(qi + off * hd, kb + c * hs, ps, len, cn, group, hd, scale, s + off * len);
        else K.attn_scores(qi + off * hd, kf + c * hs, ps, len, cn, group, hd, scale, s + off * len);
    }
    for (int64_t h = 0; h < nh; ++h) {
        if (kv.bf16) K.softmax(s + h * len, len);
        else ops::softmax_row(s + h * len, len);
    }
    for (int64_t c = c0; c < c1; c = joint ? c1 : c + 1) {
        const int64_t cn = joint ? c1 - c0 : 1, off = (c - c0) * group;
        if (kv.bf16) K.attn_wsum_bf16(s + off * len, vb + c * hs, ps, len, cn, group, hd, oi + off * hd);
        else K.attn_wsum(s + off * len, vf + c * hs, ps, len, cn, group, hd, oi + off * hd);
    }
}

} // namespace qasr::cpu
