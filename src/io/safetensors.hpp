// Safetensors reader (memory-mapped, single file or sharded through model.safetensors.index.json) and writer.
// Every header field is validated before use: these files are untrusted input.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace qasr {

enum class DType { F32, F16, BF16, U32, U8, I8, I32, I64, F64, U16, I16, BOOL };

const char* dtype_name(DType t);
size_t dtype_size(DType t);

struct TensorRef {
    std::string name;
    DType dtype = DType::F32;
    std::vector<int64_t> shape;
    const uint8_t* data = nullptr; // points into a mapping owned by the TensorStore
    size_t nbytes = 0;
    size_t numel() const;
};

class MappedFile; // read-only mmap, closed on destruction

// All tensors of a checkpoint directory (or of one .safetensors file), by stored name.
class TensorStore {
public:
    static TensorStore open_dir(const std::string& dir);   // model.safetensors or the sharded index
    static TensorStore open_file(const std::string& path); // one .safetensors file
    const TensorRef* find(const std::string& name) const;
    const std::map<std::string, TensorRef>& tensors() const { return tensors_; }
    std::map<std::string, std::string> metadata; // __metadata__ of the first file

private:
    void add_file(const std::string& path, bool take_metadata);
    std::vector<std::shared_ptr<MappedFile>> files_;
    std::map<std::string, TensorRef> tensors_;
};

// Parses a safetensors header that is already in memory (used by open_file and the fuzzer).
std::map<std::string, TensorRef> parse_safetensors(const uint8_t* bytes, size_t size, const std::string& what,
                                                   std::map<std::string, std::string>* metadata = nullptr);

struct TensorToWrite {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
};
// Writes one .safetensors file; its data section starts 64-byte aligned and so does every tensor whose size is a
// multiple of kTensorAlign (those are stored first).
constexpr size_t kTensorAlign = 64;
void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

} // namespace qasr
