// Shape formatting shared by error messages.
#include "core/tensor.hpp"

namespace qasr {

std::string shape_str(const std::vector<int64_t>& shape) {
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); ++i) {
        if (i) s += ",";
        s += std::to_string(shape[i]);
    }
    return s + "]";
}

} // namespace qasr
