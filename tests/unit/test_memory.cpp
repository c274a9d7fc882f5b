// core/memory: byte sizes as a person writes them, and the memory available with QASR_MEMORY_LIMIT's cap.
#include "core/memory.hpp"

#include <gtest/gtest.h>

#include <cstdlib>

using namespace qasr;

TEST(Memory, ByteSizes) {
    EXPECT_EQ(parse_byte_size("4096"), 4096u);
    EXPECT_EQ(parse_byte_size("300K"), 300u * 1024);
    EXPECT_EQ(parse_byte_size("512M"), 512u * 1024 * 1024);
    EXPECT_EQ(parse_byte_size("1.5GB"), uint64_t(1.5 * 1024 * 1024 * 1024));
    EXPECT_EQ(parse_byte_size("2t"), uint64_t(2) << 40);
    for (const char* bad : {"", "0", "-5M", "M", "12Q", "1e30", "nan", "5 M"}) EXPECT_EQ(parse_byte_size(bad), 0u) << bad;
    EXPECT_EQ(parse_byte_size(nullptr), 0u);
}

TEST(Memory, AvailableIsCappedByTheLimit) {
    ::unsetenv("QASR_MEMORY_LIMIT");
    const uint64_t avail = available_memory_bytes();
    ASSERT_GT(avail, uint64_t(16) << 20) << "a Linux machine reports MemAvailable";
    ::setenv("QASR_MEMORY_LIMIT", "8M", 1);
    EXPECT_EQ(available_memory_bytes(), uint64_t(8) << 20);
    ::setenv("QASR_MEMORY_LIMIT", "junk", 1); // ignored
    EXPECT_GT(available_memory_bytes(), uint64_t(16) << 20);
    ::unsetenv("QASR_MEMORY_LIMIT");
}
