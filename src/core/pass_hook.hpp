// What a long pass (log-mel, encoder, decoder over many rows) asks between its parts: it tells how far it is, as the
// fraction of the pass done (0..1, non-decreasing), and stops when the hook answers true (the pass then returns an
// empty tensor). The Session turns TranscribeOptions::abort and on_progress into one hook.
#pragma once
#include <functional>

namespace qasr {

using PassHook = std::function<bool(double done)>;

// Asks hook (may be null or empty) with `done`; true: stop.
inline bool ask(const PassHook* hook, double done) { return hook && *hook && (*hook)(done); }

// The hook of a part of a pass that spans [begin, begin + span) of the whole: asks `outer` with the whole's fraction.
inline PassHook sub_hook(const PassHook* outer, double begin, double span) {
    if (!outer || !*outer) return {};
    return [outer, begin, span](double done) { return (*outer)(begin + span * done); };
}

} // namespace qasr
