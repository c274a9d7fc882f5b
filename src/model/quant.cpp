// MLX affine quantize/dequantize, bit-exact with mlx/ops.cpp's affine_quantize (formats.md §1.2–1.3).
#include "model/quant.hpp"

#include "core/dtype.hpp"
#include "core/error.hpp"

#include <cmath>
#include <cstring>

namespace qasr {
namespace {

float read_scalar(const TensorRef& t, size_t i) {
    uint16_t h;
    switch (t.dtype) {
    case DType::F32: {
        float f;
        std::memcpy(&f, t.data + 4 * i, 4);
        return f;
    }
    case DType::BF16: std::memcpy(&h, t.data + 2 * i, 2); return bf16_to_f32(h);
    case DType::F16: std::memcpy(&h, t.data + 2 * i, 2); return f16_to_f32(h);
    default: fail("quant", t.name + ": scales/biases must be a float dtype");
    }
}

} // namespace

AffineLayout describe_affine(const TensorStore& store, const std::string& base, const std::vector<int64_t>& shape,
                             const QuantHParams& q) {
    const TensorRef* w = store.find(base + ".weight");
    const TensorRef* s = store.find(base + ".scales");
    const TensorRef* b = store.find(base + ".biases");
    const std::string C = "quant";
    if (!w || !s) fail(C, base + ": quantized module needs .weight and .scales");
    if (!b) fail(C, base + ": no .biases — only MLX affine mode is supported");
    if (shape.size() != 2) fail(C, base + ": only 2-D modules can be quantized");
    const int64_t out = shape[0], in = shape[1];
    if (w->shape.size() != 2 || w->shape[0] != out || (w->dtype != DType::U32 && w->dtype != DType::U8))
        fail(C, base + ".weight: expected U32 [" + std::to_string(out) + ", in*bits/32], got " +
                    dtype_name(w->dtype) + shape_str(w->shape));
    const int64_t packed_bits = w->shape[1] * int64_t(dtype_size(w->dtype)) * 8;
    if (packed_bits % in) fail(C, base + ".weight: packed width does not divide the input width " + std::to_string(in));
    AffineLayout L;
    L.bits = int(packed_bits / in);
    if (s->shape.size() != 2 || s->shape[0] != out || s->shape[1] <= 0 || in % s->shape[1])
        fail(C, base + ".scales: shape " + shape_str(s->shape) + " does not fit " + shape_str(shape));
    L.group_size = int(in / s->shape[1]);
    if (b->shape != s->shape) fail(C, base + ".biases: shape differs from .scales");
    if (L.bits != 2 && L.bits != 3 && L.bits != 4 && L.bits != 5 && L.bits != 6 && L.bits != 8)
        fail(C, base + ": " + std::to_string(L.bits) + "-bit codes are not an MLX affine width");
    // the module's own entry in the quantization block, else the global one
    int bits = q.bits, group_size = q.group_size;
    std::string mode = q.mode;
    if (const auto m = q.modules.find(base); m != q.modules.end()) {
        if (!m->second.bits) fail(C, base + ": stored quantized, but the config's quantization block keeps it float (false)");
        bits = m->second.bits, group_size = m->second.group_size, mode = m->second.mode;
    }
    if (bits && group_size && (bits != L.bits || group_size != L.group_size))
        fail(C, base + ": stored layout (" + std::to_string(L.bits) + " bits, group " + std::to_string(L.group_size) +
                    ") differs from config (" + std::to_string(bits) + " bits, group " + std::to_string(group_size) + ")");
    if (!mode.empty() && mode != "affine") fail(C, base + ": quantization mode '" + mode + "' is not supported");
    return L;
}

Tensor dequantize_affine(const TensorStore& store, const std::string& base, const std::vector<int64_t>& shape,
                         const QuantHParams& q) {
    const AffineLayout L = describe_affine(store, base, shape, q);
    const TensorRef& w = *store.find(base + ".weight");
    const TensorRef& s = *store.find(base + ".scales");
    const TensorRef& b = *store.find(base + ".biases");
    const int64_t out = shape[0], in = shape[1], ng = in / L.group_size;
    const size_t row_bytes = size_t(in) * size_t(L.bits) / 8;
    Tensor t(shape);
    for (int64_t r = 0; r < out; ++r) {
        const uint8_t* row = w.data + size_t(r) * row_bytes;
        for (int64_t g = 0; g < ng; ++g) {
            const float sc = read_scalar(s, size_t(r * ng + g)), bi = read_scalar(b, size_t(r * ng + g));
            for (int64_t j = g * L.group_size; j < (g + 1) * L.group_size; ++j)
                t.data[size_t(r * in + j)] = sc * float(affine_code(row, j, L.bits)) + bi;
        }
    }
    return t;
}

AffineQuantized quantize_affine(const float* w, int64_t out, int64_t in, int bits, int group_size) {
    if (in % group_size || (in * bits) % 32) fail("quant", "input width must be a multiple of the group size");
    AffineQuantized r;
    const int64_t ng = in / group_size;
    r.packed.assign(size_t(out * in * bits / 8), 0);
    r.scales.resize(size_t(out * ng));
    r.biases.resize(size_t(out * ng));
    const float n_bins = float((1 << bits) - 1);
    const size_t row_bytes = size_t(in * bits / 8);
#pragma omp parallel for schedule(static) // rows are independent (each writes its own bytes, scales, biases)
    for (int64_t row = 0; row < out; ++row) {
        uint8_t* prow = r.packed.data() + size_t(row) * row_bytes;
        for (int64_t g = 0; g < ng; ++g) {
            const float* x = w + row * in + g * group_size;
            float wmax = x[0], wmin = x[0];
            for (int i = 1; i < group_size; ++i) {
                wmax = std::max(wmax, x[i]);
                wmin = std::min(wmin, x[i]);
            }
            float scale = std::max((wmax - wmin) / n_bins, 1e-7f);
            const bool side = std::fabs(wmin) > std::fabs(wmax);
            scale = side ? scale : -scale;
            const float edge = side ? wmin : wmax;
            const float q0 = std::rint(edge / scale);
            float bias = 0.0f;
            if (q0 != 0.0f) {
                scale = edge / q0;
                bias = edge;
            }
            r.scales[size_t(row * ng + g)] = scale;
            r.biases[size_t(row * ng + g)] = bias;
            for (int i = 0; i < group_size; ++i) {
                float qf = std::rint((x[i] - bias) / scale);
                qf = std::min(std::max(qf, 0.0f), n_bins);
                const uint64_t code = uint64_t(qf);
                const uint64_t o = uint64_t(g * group_size + i) * uint64_t(bits);
                for (int k = 0; k < bits; ++k)
                    if (code >> k & 1u) prow[(o + uint64_t(k)) >> 3] |= uint8_t(1u << ((o + uint64_t(k)) & 7));
            }
        }
    }
    return r;
}

} // namespace qasr
