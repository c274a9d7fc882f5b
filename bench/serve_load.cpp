// Load generator for `qasr serve`: N clients, each on its own connection, send R requests of one audio file back to
// back; prints per-request latency (median, 90th percentile, max), throughput in audio seconds per second, the
// refusals (503) and whether every transcript equals the first one.
//   serve_load HOST PORT AUDIO [CLIENTS=4] [REQUESTS_PER_CLIENT=10] [FIELDS=response_format=verbose_json] [stream]
// With "stream" each request is a live stream instead: open, the WAV's PCM (16 kHz mono s16, 44-byte header) pushed
// in 0.25 s pieces as fast as the server answers, then finish; the latency reported is the finish's (push-to-talk:
// key release → final text), and "push_ms" the median push.
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
    if (argc < 4) {
        std::fprintf(stderr, "usage: serve_load HOST PORT AUDIO [CLIENTS] [REQUESTS_PER_CLIENT] [k=v&k=v]\n");
        return 2;
    }
    const std::string host = argv[1];
    const int port = std::atoi(argv[2]);
    std::ifstream in(argv[3], std::ios::binary);
    const std::string audio((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (audio.empty()) {
        std::fprintf(stderr, "serve_load: cannot read %s\n", argv[3]);
        return 2;
    }
    const int clients = argc > 4 ? std::max(1, std::atoi(argv[4])) : 4;
    const int per = argc > 5 ? std::max(1, std::atoi(argv[5])) : 10;
    httplib::MultipartFormDataItems fields = {{"file", audio, "audio", "application/octet-stream"},
                                              {"response_format", "verbose_json", "", ""}};
    if (argc > 6) {
        std::stringstream ss(argv[6]);
        std::string kv;
        while (std::getline(ss, kv, '&'))
            if (const auto eq = kv.find('='); eq != std::string::npos) {
                const std::string k = kv.substr(0, eq);
                fields.erase(std::remove_if(fields.begin(), fields.end(), [&](const auto& f) { return f.name == k; }),
                             fields.end());
                fields.push_back({k, kv.substr(eq + 1), "", ""});
            }
    }
    const bool stream = argc > 7 && std::string(argv[7]) == "stream";
    std::string query;
    for (const auto& f : fields)
        if (f.name != "file") query += (query.empty() ? "?" : "&") + f.name + "=" + f.content;
    std::vector<double> push_ms;
    std::mutex m;
    std::vector<double> lat;
    std::string first_text;
    int ok = 0, busy = 0, other = 0, differ = 0;
    double audio_s = 0;
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> th;
    for (int c = 0; c < clients; ++c)
        th.emplace_back([&] {
            httplib::Client cl(host, port);
            cl.set_read_timeout(600, 0);
            cl.set_keep_alive(true);
            cl.set_tcp_nodelay(true); // else the body waits for the ACK of the headers (Nagle + delayed ACK)
            for (int i = 0; i < per; ++i) {
                std::string base;
                if (stream) { // open, push, then time the finish
                    auto o = cl.Post("/v1/streams", "", "application/octet-stream");
                    const auto jo = o && o->status == 201 ? nlohmann::json::parse(o->body, nullptr, false) : nlohmann::json();
                    if (!jo.is_object() || !jo.contains("id")) {
                        std::lock_guard<std::mutex> lk(m);
                        ++other;
                        continue;
                    }
                    base = "/v1/streams/" + jo["id"].get<std::string>();
                    for (size_t at = 44; at + 1 < audio.size(); at += 8000) {
                        const size_t n = std::min<size_t>(8000, audio.size() - at) & ~size_t(1);
                        const auto p0 = std::chrono::steady_clock::now();
                        cl.Post((base + "/audio").c_str(), audio.substr(at, n), "application/octet-stream");
                        const double pm = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - p0).count();
                        std::lock_guard<std::mutex> lk(m);
                        push_ms.push_back(pm);
                    }
                }
                const auto a = std::chrono::steady_clock::now();
                auto r = stream ? cl.Post((base + "/finish" + query).c_str(), "", "application/octet-stream")
                                : cl.Post("/v1/audio/transcriptions", fields);
                const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count();
                std::lock_guard<std::mutex> lk(m);
                if (!r || (r->status != 200 && r->status != 503)) {
                    ++other;
                    if (r) std::fprintf(stderr, "serve_load: HTTP %d: %s", r->status, r->body.c_str());
                    continue;
                }
                if (r->status == 503) {
                    ++busy;
                    continue;
                }
                const auto j = nlohmann::json::parse(r->body, nullptr, false);
                const std::string text = j.is_object() && j.contains("text") ? j["text"].get<std::string>() : r->body;
                if (j.is_object() && j.contains("duration")) audio_s += j["duration"].get<double>();
                if (ok == 0) first_text = text;
                differ += text != first_text;
                ++ok;
                lat.push_back(ms);
            }
        });
    for (auto& t : th) t.join();
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::sort(lat.begin(), lat.end());
    std::sort(push_ms.begin(), push_ms.end());
    if (stream)
        std::printf("{\"stream_pushes\": %zu, \"push_ms\": {\"median\": %.2f, \"max\": %.2f}}\n", push_ms.size(),
                    push_ms.empty() ? 0.0 : push_ms[push_ms.size() / 2], push_ms.empty() ? 0.0 : push_ms.back());
    auto pct = [&](double p) { return lat.empty() ? 0.0 : lat[std::min(lat.size() - 1, size_t(p * double(lat.size())))]; };
    std::printf("{\"clients\": %d, \"requests\": %d, \"ok\": %d, \"busy_503\": %d, \"failed\": %d, \"texts_differing\": %d, "
                "\"latency_ms\": {\"median\": %.2f, \"p90\": %.2f, \"max\": %.2f}, \"wall_s\": %.3f, "
                "\"requests_per_s\": %.2f, \"audio_s_per_s\": %.1f}\n",
                clients, clients * per, ok, busy, other, differ, pct(0.5), pct(0.9), lat.empty() ? 0.0 : lat.back(), wall,
                double(ok) / wall, audio_s / wall);
    return other || differ ? 1 : 0;
}
