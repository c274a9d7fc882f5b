// The host memory a request may still take: what the kernel reports available (MemAvailable), capped by the
// cgroup's limit where one applies (containers). Linux overcommits, so an allocation larger than this succeeds and
// the process is killed when it is touched; callers that can foresee a large allocation check against this first.
#pragma once
#include <cstdint>

namespace qasr {

// Bytes; 0 when unknown (no /proc/meminfo). QASR_MEMORY_LIMIT (bytes, or with a K, M, G or T suffix: binary units)
// caps it: what a deployment lets qasr take, and how tests exercise the refusals.
uint64_t available_memory_bytes();
// "512M" → 536870912; 0 for an empty, malformed or zero value.
uint64_t parse_byte_size(const char* s);

} // namespace qasr
