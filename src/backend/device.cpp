// open_device(): "cpu" needs no context; "cuda[:N]" goes to the CUDA backend when it was built.
#include "backend/device.hpp"

#include "core/error.hpp"

#include <cstdlib>
#include <future>
#include <thread>

namespace qasr {

#ifdef QASR_HAVE_CUDA
namespace cuda {
std::shared_ptr<const DeviceContext> open_context(const Model& model, int ordinal);
int device_count();
std::string device_description(int ordinal);
void init_context(int ordinal) noexcept;
void prime_kernels(int ordinal) noexcept;
} // namespace cuda
bool built_with_cuda() { return true; }
int cuda_device_count() { return cuda::device_count(); }
std::string cuda_device_description(int ordinal) { return cuda::device_description(ordinal); }
#else
bool built_with_cuda() { return false; }
int cuda_device_count() { return 0; }
std::string cuda_device_description(int) { return ""; }
#endif

struct DeviceWarmer::Impl {
    std::thread t;
    std::promise<void> ready;
    std::future<void> ready_f = ready.get_future();
};

DeviceWarmer::DeviceWarmer(const std::string& device) {
#ifdef QASR_HAVE_CUDA
    if (device.rfind("cuda", 0) != 0) return;
    const int ordinal = device.size() > 5 && device[4] == ':' ? std::atoi(device.c_str() + 5) : 0;
    impl_ = std::make_unique<Impl>();
    // errors surface later in open_device; the priming runs beside the weights' upload (join() returns before it)
    impl_->t = std::thread([ordinal, impl = impl_.get()] {
        cuda::init_context(ordinal);
        impl->ready.set_value();
        cuda::prime_kernels(ordinal);
    });
#else
    (void)device;
#endif
}

DeviceWarmer::~DeviceWarmer() { finish(); }

void DeviceWarmer::join() {
    if (impl_ && impl_->ready_f.valid()) impl_->ready_f.wait();
}

void DeviceWarmer::finish() {
    if (impl_ && impl_->t.joinable()) impl_->t.join();
}

void DeviceSession::throw_unsupported(const char* what) {
    fail("device", std::string(what) + " is not supported by this device backend");
}

std::shared_ptr<const DeviceContext> open_device(const Model& model, const std::string& device) {
    if (device.empty() || device == "cpu") return nullptr;
    if (device.rfind("cuda", 0) != 0)
        fail("device", "unknown device '" + device + "' (use cpu, cuda or cuda:N)");
    int ordinal = 0;
    if (device.size() > 4) {
        if (device[4] != ':' || device.size() == 5) fail("device", "bad device '" + device + "' (use cuda:N)");
        char* end = nullptr;
        const long n = std::strtol(device.c_str() + 5, &end, 10);
        if (*end || n < 0 || n > 255) fail("device", "bad device ordinal in '" + device + "'");
        ordinal = int(n);
    }
#ifdef QASR_HAVE_CUDA
    return cuda::open_context(model, ordinal);
#else
    (void)model;
    (void)ordinal;
    fail("device", "this qasr was built without the CUDA backend (configure with -DQASR_CUDA=ON and a CUDA toolkit)");
#endif
}

} // namespace qasr
