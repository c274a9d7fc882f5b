// AudioCapture through the microphone module (libqasr_capture.so, capture_sdl_module.cpp; capture_abi.h says why it
// is a module; core/module.hpp where it is looked for, QASR_CAPTURE_MODULE names it): the module's thread hands each
// buffer to a queue that read() empties.
#include "capture.hpp"
#include "capture_abi.h"

#include "core/module.hpp"

#include <condition_variable>
#include <mutex>
#include <stdexcept>

namespace qasr::cli {

namespace {
const qasr::LoadedModule& module() {
    static const qasr::LoadedModule m = qasr::load_module("libqasr_capture.so", QASR_CAPTURE_SYMBOL, "QASR_CAPTURE_MODULE");
    return m;
}
const QasrCaptureApi& api() {
    const qasr::LoadedModule& m = module();
    if (!m.symbol) throw std::runtime_error("microphone capture: its module (libqasr_capture.so) was not found: " + m.where);
    return *reinterpret_cast<QasrCaptureApiFn>(m.symbol)();
}
} // namespace

struct AudioCapture::Impl {
    const QasrCaptureApi* api = nullptr;
    void* dev = nullptr;
    std::mutex m;
    std::condition_variable cv;
    std::vector<int16_t> queued;
    ~Impl() {
        if (dev) api->close(dev); // no callback after this
    }
    static void captured(void* self, const int16_t* x, size_t n) {
        auto* impl = static_cast<Impl*>(self);
        {
            std::lock_guard<std::mutex> lk(impl->m);
            impl->queued.insert(impl->queued.end(), x, x + n);
        }
        impl->cv.notify_one();
    }
};

AudioCapture::AudioCapture(const std::string& device) : impl_(std::make_unique<Impl>()) {
    impl_->api = &api();
    char driver[128] = {}, err[512] = {};
    impl_->dev = impl_->api->open(device.empty() ? nullptr : device.c_str(), &Impl::captured, impl_.get(), driver,
                                  sizeof driver, err, sizeof err);
    driver_ = driver;
    if (!impl_->dev)
        throw std::runtime_error("microphone capture: cannot open " +
                                 (device.empty() ? std::string("the default capture device") : "capture device \"" + device + "\"") +
                                 " (SDL audio driver " + (driver_.empty() ? std::string("none") : driver_) + "): " + err +
                                 " (qasr stream --list-devices lists the devices)");
    name_ = device.empty() ? "default" : device;
}

AudioCapture::~AudioCapture() = default;

void AudioCapture::read(std::vector<int16_t>& out, std::chrono::milliseconds wait) {
    if (impl_->api->stopped(impl_->dev))
        throw std::runtime_error("microphone capture: the device \"" + name_ + "\" stopped (unplugged?)");
    std::unique_lock<std::mutex> lk(impl_->m);
    impl_->cv.wait_for(lk, wait, [&] { return !impl_->queued.empty(); });
    out.insert(out.end(), impl_->queued.begin(), impl_->queued.end());
    impl_->queued.clear();
}

bool AudioCapture::available() { return module().symbol != nullptr; }

std::string AudioCapture::module_path() { return module().symbol ? module().where : std::string(); }

std::vector<std::string> AudioCapture::devices() {
    std::vector<std::string> names;
    char err[512] = {};
    if (api().devices([](void* ctx, const char* s) { static_cast<std::vector<std::string>*>(ctx)->emplace_back(s); },
                      &names, err, sizeof err) != 0)
        throw std::runtime_error(std::string("microphone capture: ") + err);
    return names;
}

} // namespace qasr::cli
