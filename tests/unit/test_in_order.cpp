// run_in_order (pipeline/in_order.hpp): results in order whatever order the jobs finish in, at most `parallel` at
// once, a failing job reported after the ones before it, no job started after a failure, take's exceptions.
#include "pipeline/in_order.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>

using qasr::run_in_order;

namespace {
void nap(size_t i) { std::this_thread::sleep_for(std::chrono::milliseconds((i * 7919) % 13)); }
} // namespace

TEST(InOrder, ResultsComeInOrderWithBoundedParallelism) {
    for (int parallel : {1, 2, 5, 64}) {
        std::atomic<int> running{0}, most{0};
        std::vector<size_t> got;
        run_in_order<size_t>(
            40, parallel,
            [&](size_t i) {
                const int now = ++running;
                for (int m = most; now > m && !most.compare_exchange_weak(m, now);) {
                }
                nap(i);
                --running;
                return i * i;
            },
            [&](size_t& r) { got.push_back(r); });
        ASSERT_EQ(got.size(), 40u) << parallel;
        for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], i * i) << parallel;
        EXPECT_LE(most.load(), parallel) << parallel;
        if (parallel > 1) {
            EXPECT_GT(most.load(), 1) << parallel;
        }
    }
    int calls = 0;
    run_in_order<int>(0, 4, [&](size_t) { return ++calls; }, [&](int&) { ++calls; });
    EXPECT_EQ(calls, 0);
}

TEST(InOrder, AFailingJobComesAfterTheOnesBeforeIt) {
    for (int parallel : {1, 3}) {
        std::vector<size_t> got;
        std::atomic<size_t> highest{0};
        EXPECT_THROW(run_in_order<size_t>(
                         30, parallel,
                         [&](size_t i) {
                             for (size_t h = highest; i > h && !highest.compare_exchange_weak(h, i);) {
                             }
                             if (i == 10) throw std::runtime_error("job 10");
                             nap(30 - i); // earlier jobs finish later
                             return i;
                         },
                         [&](size_t& r) { got.push_back(r); }),
                     std::runtime_error);
        ASSERT_EQ(got.size(), 10u) << parallel;
        for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], i);
        // past the failure ran only the jobs in flight (and, at most, one more each that a worker took while the
        // failure was being recorded)
        EXPECT_LE(highest.load(), size_t(10 + 2 * parallel)) << parallel;
    }
}

TEST(InOrder, TakeThrowingStopsTheRest) {
    std::atomic<int> started{0};
    int taken = 0;
    EXPECT_THROW(run_in_order<int>(
                     50, 4,
                     [&](size_t i) {
                         ++started;
                         nap(i);
                         return int(i);
                     },
                     [&](int& r) {
                         ++taken;
                         if (r == 5) throw std::logic_error("enough");
                     }),
                 std::logic_error);
    EXPECT_EQ(taken, 6);
    EXPECT_LT(started.load(), 50);
}
