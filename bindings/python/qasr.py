"""qasr: Qwen3-ASR speech recognition from Python, over the C API of libqasr.so (ctypes; nothing to compile).

    import qasr
    model = qasr.Model("models/demo")                 # qasr.Model(dir, device="cuda", warmup=True, max_batch=8)
    r = model.transcribe("samples/demo_en.wav")       # a path, an encoded file's bytes, or 16 kHz mono floats
    print(r.text, r.language, r.rtf)

The library is $QASR_LIBRARY if set, else libqasr.so beside this file, in the source tree's build/src (after
scripts/build.sh), or installed (`cmake --install`).
Calls release the GIL: threads may transcribe on one Model at once (with max_batch > 1 their steps decode together).
Failures raise qasr.Error (its .status names the C status: "model", "audio", "invalid argument", ...).
"""
from __future__ import annotations

import array
import ctypes
import ctypes.util
import os
import weakref
from dataclasses import dataclass, field
from typing import Callable, List, Optional, Sequence, Tuple, Union

__all__ = ["Model", "Stream", "Result", "Segment", "StreamEvent", "Error", "Cancelled", "version", "system_info"]

_STATUS = {1: "invalid argument", 2: "model", 3: "audio", 4: "out of memory", 5: "internal", 6: "cancelled"}


class Error(RuntimeError):
    """A failure reported by libqasr; .status is the C status ("model", "audio", "invalid argument", ...)."""

    def __init__(self, status: str, message: str):
        super().__init__(message)
        self.status = status


class Cancelled(Error):
    """Model.transcribe's abort callable stopped the transcription (status "cancelled")."""


class _LoadParams(ctypes.Structure):
    _fields_ = [("n_threads", ctypes.c_int), ("warmup", ctypes.c_int), ("device", ctypes.c_char_p),
                ("max_batch", ctypes.c_int), ("compute", ctypes.c_char_p)]


_SEGMENT_CB = ctypes.CFUNCTYPE(None, ctypes.c_char_p, ctypes.c_double, ctypes.c_double, ctypes.c_void_p)
_ABORT_CB = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)
_TEXT_CB = ctypes.CFUNCTYPE(None, ctypes.c_char_p, ctypes.c_void_p)
_PROGRESS_CB = ctypes.CFUNCTYPE(None, ctypes.c_float, ctypes.c_void_p)
_TEXT_TOKENS_CB = ctypes.CFUNCTYPE(None, ctypes.c_char_p, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_float),
                                   ctypes.c_size_t, ctypes.c_void_p)


class _TranscribeParams(ctypes.Structure):
    _fields_ = [("language", ctypes.c_char_p), ("context", ctypes.c_char_p), ("max_new_tokens", ctypes.c_int),
                ("ignore_eos", ctypes.c_int), ("temperature", ctypes.c_float), ("top_p", ctypes.c_float),
                ("seed", ctypes.c_uint64), ("itn", ctypes.c_int), ("segment_seconds", ctypes.c_double),
                ("on_segment", _SEGMENT_CB), ("user_data", ctypes.c_void_p), ("language_only", ctypes.c_int),
                ("aligner", ctypes.c_void_p), ("beam_size", ctypes.c_int), ("length_penalty", ctypes.c_float),
                ("abort_callback", _ABORT_CB), ("abort_user_data", ctypes.c_void_p), ("on_text", _TEXT_CB),
                ("on_progress", _PROGRESS_CB), ("offset_seconds", ctypes.c_double),
                ("duration_seconds", ctypes.c_double), ("on_text_tokens", _TEXT_TOKENS_CB)]


class _StreamParams(ctypes.Structure):
    _fields_ = [("language", ctypes.c_char_p), ("context", ctypes.c_char_p), ("chunk_seconds", ctypes.c_float),
                ("rollback_tokens", ctypes.c_int), ("unfixed_chunks", ctypes.c_int),
                ("max_segment_windows", ctypes.c_int), ("exact_final", ctypes.c_int), ("itn", ctypes.c_int),
                ("speculative", ctypes.c_int), ("pause_seconds", ctypes.c_float), ("endpoint_final", ctypes.c_int),
                ("logprobs", ctypes.c_int)]


class _StreamEvent(ctypes.Structure):
    _fields_ = [("is_final", ctypes.c_int), ("stable", ctypes.c_char_p), ("unstable", ctypes.c_char_p),
                ("language", ctypes.c_char_p), ("audio_seconds", ctypes.c_double)]


_STREAM_CB = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.POINTER(_StreamEvent))


def _find_library() -> Optional[str]:
    """$QASR_LIBRARY; libqasr.so beside this file; the source tree's build/src (scripts/build.sh); the system's."""
    if os.environ.get("QASR_LIBRARY"):
        return os.environ["QASR_LIBRARY"]
    here = os.path.dirname(os.path.abspath(__file__))
    for cand in (os.path.join(here, "libqasr.so"), os.path.join(here, "..", "..", "build", "src", "libqasr.so")):
        if os.path.exists(cand):
            return cand
    for d in ("/usr/local/lib", "/usr/local/lib64"):  # `cmake --install` without ldconfig afterwards
        if os.path.exists(os.path.join(d, "libqasr.so")):
            return os.path.join(d, "libqasr.so")
    return ctypes.util.find_library("qasr")


def _load_library() -> ctypes.CDLL:
    path = _find_library()
    if not path:
        raise ImportError("libqasr.so not found: set QASR_LIBRARY to its path (build/src/libqasr.so after "
                          "scripts/build.sh), or install qasr with `cmake --install`")
    lib = ctypes.CDLL(path)
    P, c = ctypes.c_void_p, ctypes
    sigs = {
        "qasr_version": (c.c_char_p, []),
        "qasr_system_info": (c.c_char_p, []),
        "qasr_last_error": (c.c_char_p, []),
        "qasr_default_load_params": (_LoadParams, []),
        "qasr_default_transcribe_params": (_TranscribeParams, []),
        "qasr_default_stream_params": (_StreamParams, []),
        "qasr_model_load": (c.c_int, [c.c_char_p, c.POINTER(_LoadParams), c.POINTER(P)]),
        "qasr_model_free": (None, [P]),
        "qasr_transcribe_file": (c.c_int, [P, c.c_char_p, c.POINTER(_TranscribeParams), c.POINTER(P)]),
        "qasr_transcribe_memory": (c.c_int, [P, c.c_void_p, c.c_size_t, c.POINTER(_TranscribeParams), c.POINTER(P)]),
        "qasr_transcribe_pcm": (c.c_int, [P, c.POINTER(c.c_float), c.c_size_t, c.POINTER(_TranscribeParams),
                                          c.POINTER(P)]),
        "qasr_result_text": (c.c_char_p, [P]),
        "qasr_result_language": (c.c_char_p, [P]),
        "qasr_result_language_probability": (c.c_double, [P]),
        "qasr_result_raw_text": (c.c_char_p, [P]),
        "qasr_result_rtf": (c.c_double, [P]),
        "qasr_result_audio_seconds": (c.c_double, [P]),
        "qasr_result_n_tokens": (c.c_size_t, [P]),
        "qasr_result_token_id": (c.c_int, [P, c.c_size_t]),
        "qasr_result_token_logprob": (c.c_float, [P, c.c_size_t]),
        "qasr_result_finish_reason": (c.c_char_p, [P]),
        "qasr_result_n_segments": (c.c_size_t, [P]),
        "qasr_result_segment_start": (c.c_double, [P, c.c_size_t]),
        "qasr_result_segment_end": (c.c_double, [P, c.c_size_t]),
        "qasr_result_segment_text": (c.c_char_p, [P, c.c_size_t]),
        "qasr_result_segment_first_token": (c.c_size_t, [P, c.c_size_t]),
        "qasr_result_segment_n_tokens": (c.c_size_t, [P, c.c_size_t]),
        "qasr_result_subtitles": (c.c_char_p, [P, c.c_char_p]),
        "qasr_result_n_words": (c.c_size_t, [P]),
        "qasr_result_word_start": (c.c_double, [P, c.c_size_t]),
        "qasr_result_word_end": (c.c_double, [P, c.c_size_t]),
        "qasr_result_word_text": (c.c_char_p, [P, c.c_size_t]),
        "qasr_result_free": (None, [P]),
        "qasr_aligner_load": (c.c_int, [c.c_char_p, c.POINTER(_LoadParams), c.POINTER(P)]),
        "qasr_aligner_free": (None, [P]),
        "qasr_align_file": (c.c_int, [P, c.c_char_p, c.c_char_p, c.POINTER(P)]),
        "qasr_align_pcm": (c.c_int, [P, c.POINTER(c.c_float), c.c_size_t, c.c_char_p, c.POINTER(P)]),
        "qasr_stream_open": (c.c_int, [P, c.POINTER(_StreamParams), _STREAM_CB, P, c.POINTER(P)]),
        "qasr_stream_push": (c.c_int, [P, c.POINTER(c.c_float), c.c_size_t]),
        "qasr_stream_push_s16le": (c.c_int, [P, c.c_char_p, c.c_size_t]),
        "qasr_stream_next_event": (c.c_int, [P, c.POINTER(_StreamEvent)]),
        "qasr_stream_interrupt": (None, [P]),
        "qasr_stream_trailing_quiet_seconds": (c.c_double, [P]),
        "qasr_stream_finish": (c.c_int, [P, c.POINTER(P)]),
        "qasr_stream_free": (None, [P]),
    }
    for name, (res, args) in sigs.items():
        f = getattr(lib, name)
        f.restype, f.argtypes = res, args
    return lib


_lib = _load_library()


def version() -> str:
    """libqasr's version ("MAJOR.MINOR.PATCH")."""
    return _lib.qasr_version().decode()


def system_info() -> str:
    """The version, build features (CUDA, FFmpeg, OpenBLAS), CPU kernels and CUDA devices, as lines."""
    return _lib.qasr_system_info().decode("utf-8", "replace")


def _check(status: int) -> None:
    if status != 0:
        cls = Cancelled if status == 6 else Error
        raise cls(_STATUS.get(status, str(status)), _lib.qasr_last_error().decode("utf-8", "replace"))


def _bytes(s: Optional[str]) -> Optional[bytes]:
    return None if s is None else s.encode("utf-8")


def _text(b: Optional[bytes]) -> str:
    return "" if b is None else b.decode("utf-8", "replace")


@dataclass
class Segment:
    start: float  # seconds
    end: float
    text: str
    # its tokens: Result.tokens[first_token:first_token + n_tokens] (not compared: on_segment's have none)
    first_token: int = field(default=0, compare=False)
    n_tokens: int = field(default=0, compare=False)


@dataclass
class Word:
    text: str  # as the aligner saw it: punctuation removed, a CJK character on its own
    start: float  # seconds
    end: float


@dataclass
class Result:
    text: str
    language: str
    raw_text: str
    rtf: float
    audio_seconds: float
    finish_reason: str  # "eos", "token_cap", "repetition", "empty"
    tokens: List[Tuple[int, float]] = field(default_factory=list)  # (id, log-probability)
    segments: List[Segment] = field(default_factory=list)
    srt: str = ""  # the segments as SubRip / WebVTT subtitles (with segment_seconds)
    vtt: str = ""
    language_probability: float = 0.0  # the model's probability of its language tag (0: forced or none)
    words: List[Word] = field(default_factory=list)  # word timestamps (Aligner.align)

    @staticmethod
    def _take(h: ctypes.c_void_p) -> "Result":
        try:
            n, m = _lib.qasr_result_n_tokens(h), _lib.qasr_result_n_segments(h)
            return Result(
                text=_text(_lib.qasr_result_text(h)), language=_text(_lib.qasr_result_language(h)),
                raw_text=_text(_lib.qasr_result_raw_text(h)), rtf=_lib.qasr_result_rtf(h),
                audio_seconds=_lib.qasr_result_audio_seconds(h),
                finish_reason=_text(_lib.qasr_result_finish_reason(h)),
                tokens=[(_lib.qasr_result_token_id(h, i), _lib.qasr_result_token_logprob(h, i)) for i in range(n)],
                segments=[Segment(_lib.qasr_result_segment_start(h, i), _lib.qasr_result_segment_end(h, i),
                                  _text(_lib.qasr_result_segment_text(h, i)), _lib.qasr_result_segment_first_token(h, i),
                                  _lib.qasr_result_segment_n_tokens(h, i)) for i in range(m)],
                srt=_text(_lib.qasr_result_subtitles(h, b"srt")) if m else "",
                vtt=_text(_lib.qasr_result_subtitles(h, b"vtt")) if m else "",
                language_probability=_lib.qasr_result_language_probability(h),
                words=[Word(_text(_lib.qasr_result_word_text(h, i)), _lib.qasr_result_word_start(h, i),
                            _lib.qasr_result_word_end(h, i)) for i in range(_lib.qasr_result_n_words(h))])
        finally:
            _lib.qasr_result_free(h)


Audio = Union[str, os.PathLike, bytes, bytearray, memoryview, Sequence[float]]


def _floats(samples) -> Tuple[object, object, int]:
    """(owner, float*, count) over 16 kHz mono samples: array('f') and float32 NumPy arrays without a copy, any other
    float sequence copied. The owner must outlive the call."""
    if hasattr(samples, "__array_interface__"):  # NumPy without importing it
        import numpy as np
        a = np.ascontiguousarray(samples, dtype=np.float32)
        return a, a.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), a.size
    a = samples if isinstance(samples, array.array) and samples.typecode == "f" else array.array("f", samples)
    if not a:
        return a, ctypes.cast(ctypes.c_void_p(0), ctypes.POINTER(ctypes.c_float)), 0
    ptr, n = a.buffer_info()
    return a, ctypes.cast(ctypes.c_void_p(ptr), ctypes.POINTER(ctypes.c_float)), n


class _Owned:
    """A libqasr handle freed by close(), on leaving a `with` block or when collected; use after close() raises."""
    _free_name = ""  # the C function that frees the handle
    _what = ""

    def _handle(self) -> ctypes.c_void_p:
        if not getattr(self, "_h", None):
            raise ValueError("the %s is closed" % self._what)
        return self._h

    def close(self) -> None:
        if getattr(self, "_h", None) and _lib is not None:  # (_lib is None while the interpreter shuts down)
            getattr(_lib, self._free_name)(self._h)
            self._h = None

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()


class Model(_Owned):
    """A loaded Qwen3-ASR model (immutable; any number of threads and streams may use it at once)."""
    _free_name, _what = "qasr_model_free", "model"

    def __init__(self, model_dir: Union[str, os.PathLike], *, threads: int = 0, warmup: bool = False,
                 device: Optional[str] = None, max_batch: int = 1, compute: Optional[str] = None):
        p = _lib.qasr_default_load_params()
        p.n_threads, p.warmup, p.max_batch = threads, int(warmup), max_batch
        p.device, p.compute = _bytes(device), _bytes(compute)
        h = ctypes.c_void_p()
        _check(_lib.qasr_model_load(os.fsencode(model_dir), ctypes.byref(p), ctypes.byref(h)))
        self._h = h
        self._streams = weakref.WeakSet()

    def close(self) -> None:
        """Frees the model now; streams still open on it are closed first."""
        for st in list(getattr(self, "_streams", ())):
            st.close()
        super().close()

    def transcribe(self, audio: Audio, *, language: Optional[str] = None, context: Optional[str] = None,
                   max_new_tokens: int = 0, ignore_eos: bool = False, temperature: float = 0.0,
                   top_p: float = 1.0, seed: int = 0, itn: bool = True, segment_seconds: float = 0.0,
                   on_segment: Optional[Callable[[Segment], None]] = None, language_only: bool = False,
                   aligner: Optional["Aligner"] = None, beam_size: int = 1, length_penalty: float = 1.0,
                   abort: Optional[Callable[[], bool]] = None,
                   on_text: Optional[Callable[[str], None]] = None,
                   on_progress: Optional[Callable[[float], None]] = None,
                   offset: float = 0.0, duration: float = 0.0,
                   on_text_tokens: Optional[Callable[[str, List[Tuple[int, float]]], None]] = None) -> Result:
        """Transcribes a file path, an encoded file's bytes (WAV; with FFmpeg mp3, flac, ogg, m4a ...) or 16 kHz
        mono float samples. segment_seconds > 0 cuts at pauses (pieces of at most that long) for segment times;
        on_segment is called with each segment as its piece is done. language_only identifies the language
        without transcribing (r.language, r.language_probability; the text stays empty). aligner (an Aligner) adds
        word timestamps (r.words). beam_size > 1 decodes by beam search (greedy otherwise; temperature must be 0),
        length_penalty the exponent of the length its scores are divided by. abort: called before each stage and
        decode step (possibly on another thread); once it returns True the call stops and raises Cancelled (e.g.
        abort=event.is_set for a threading.Event set by a stop button). on_text is called with each delta of the
        text as the model writes it (they concatenate to the text before inverse text normalization);
        on_text_tokens with each delta and its tokens, (id, log-probability) pairs (those decoded since the previous
        delta: a delta's confidence). on_progress
        is called with the call's progress, a fraction for a progress bar: 0 first, non-decreasing, 1 once at the
        end (an estimate). offset and duration (seconds; 0: to the end) transcribe a part of the audio; segment
        and word times stay those of the whole audio."""
        h = self._handle()
        p = _lib.qasr_default_transcribe_params()
        p.language, p.context = _bytes(language), _bytes(context)
        p.max_new_tokens, p.ignore_eos, p.temperature, p.top_p = max_new_tokens, int(ignore_eos), temperature, top_p
        p.seed, p.itn, p.segment_seconds, p.language_only = seed, int(itn), segment_seconds, int(language_only)
        p.aligner = aligner._handle() if aligner is not None else None
        p.beam_size, p.length_penalty = beam_size, length_penalty
        p.offset_seconds, p.duration_seconds = offset, duration
        raised: List[BaseException] = []
        if on_segment is not None:
            def cb(text, start, end, _user):
                if raised:
                    return
                try:
                    on_segment(Segment(start, end, _text(text)))
                except BaseException as e:  # re-raised after the call; ctypes would only print it
                    raised.append(e)
            p.on_segment = _SEGMENT_CB(cb)
        if on_text is not None:
            pending = bytearray()  # a delta is whole UTF-8 characters; kept for safety across calls

            def text_cb(delta, _user):
                if raised:
                    return
                try:
                    pending.extend(delta or b"")
                    s = pending.decode("utf-8")
                    pending.clear()
                    if s:
                        on_text(s)
                except UnicodeDecodeError:
                    pass
                except BaseException as e:  # stops the call (the abort callback below); re-raised after it
                    raised.append(e)
            p.on_text = _TEXT_CB(text_cb)
        if on_text_tokens is not None:
            def text_tokens_cb(delta, ids, logprobs, n, _user):
                if raised:
                    return
                try:
                    on_text_tokens((delta or b"").decode("utf-8", "replace"), [(ids[i], logprobs[i]) for i in range(n)])
                except BaseException as e:  # stops the call (the abort callback below); re-raised after it
                    raised.append(e)
            p.on_text_tokens = _TEXT_TOKENS_CB(text_tokens_cb)
        if on_progress is not None:
            def progress_cb(fraction, _user):
                if raised:
                    return
                try:
                    on_progress(float(fraction))
                except BaseException as e:  # stops the call (the abort callback below); re-raised after it
                    raised.append(e)
            p.on_progress = _PROGRESS_CB(progress_cb)
        if abort is not None or on_segment is not None or on_text is not None or on_progress is not None \
                or on_text_tokens is not None:
            # a callback's exception stops the call
            def stop(_user):
                if raised:
                    return 1
                try:
                    return 1 if abort is not None and abort() else 0
                except BaseException as e:  # stops the call; re-raised after it
                    raised.append(e)
                    return 1
            p.abort_callback = _ABORT_CB(stop)
        out = ctypes.c_void_p()
        if isinstance(audio, (str, os.PathLike)):
            status = _lib.qasr_transcribe_file(h, os.fsencode(audio), ctypes.byref(p), ctypes.byref(out))
        elif isinstance(audio, (bytes, bytearray, memoryview)):
            buf = bytes(audio)
            status = _lib.qasr_transcribe_memory(h, buf, len(buf), ctypes.byref(p), ctypes.byref(out))
        else:
            keep, ptr, n = _floats(audio)
            status = _lib.qasr_transcribe_pcm(h, ptr, n, ctypes.byref(p), ctypes.byref(out))  # keep: alive to here
        if raised:
            if status == 0:
                _lib.qasr_result_free(out)
            raise raised[0]
        _check(status)
        return Result._take(out)

    def open_stream(self, *, language: Optional[str] = None, context: Optional[str] = None,
                    chunk_seconds: float = 2.0, exact_final: bool = False, itn: bool = True,
                    speculative: bool = True, pause_seconds: float = 0.0, endpoint_final: bool = False,
                    logprobs: bool = False) -> "Stream":
        """A live transcription: push audio as it is recorded, read partial text, finish() for the final.
        speculative=False: the final continues after the partials' stable text and keeps it (for an app that types
        stable text as it comes; by default the final decodes afresh, as offline, and may revise it).
        pause_seconds > 0: a quiet stretch that long after speech triggers a step over all audio so far;
        endpoint_final: then finish() after only quiet returns that step's transcript (approximate).
        logprobs: the final Result lists its tokens with log-probabilities and the language tag's probability, as
        transcribe() results do (else they stay empty and 0)."""
        return Stream(self, language, context, chunk_seconds, exact_final, itn, speculative, pause_seconds,
                      endpoint_final, logprobs)


@dataclass
class StreamEvent:
    final: bool
    stable: str    # text later partials keep (speculative=False: the final keeps it too)
    unstable: str  # tail that may still change
    language: str
    audio_seconds: float

    @property
    def text(self) -> str:
        return self.stable + self.unstable


class Stream(_Owned):
    """Live transcription (Model.open_stream): push() 16 kHz mono floats or push_s16le() raw PCM bytes, events()
    for the partial texts so far, finish() for the final Result. interrupt() (thread-safe) stops a step in
    progress (push-to-talk: on key release)."""
    _free_name, _what = "qasr_stream_free", "stream"

    def __init__(self, model: Model, language, context, chunk_seconds, exact_final, itn, speculative=True,
                 pause_seconds=0.0, endpoint_final=False, logprobs=False):
        p = _lib.qasr_default_stream_params()
        p.language, p.context = _bytes(language), _bytes(context)
        p.chunk_seconds, p.exact_final, p.itn = chunk_seconds, int(exact_final), int(itn)
        p.speculative, p.pause_seconds, p.endpoint_final = int(speculative), float(pause_seconds), int(endpoint_final)
        p.logprobs = int(logprobs)
        self._model = model  # kept alive while the stream is
        h = ctypes.c_void_p()
        _check(_lib.qasr_stream_open(model._handle(), ctypes.byref(p), _STREAM_CB(), None, ctypes.byref(h)))
        self._h = h
        model._streams.add(self)


    def push(self, samples) -> None:
        keep, ptr, n = _floats(samples)
        _check(_lib.qasr_stream_push(self._handle(), ptr, n))  # keep: alive to here

    def push_s16le(self, data: bytes) -> None:
        data = bytes(data)
        _check(_lib.qasr_stream_push_s16le(self._handle(), data, len(data)))

    def events(self) -> List[StreamEvent]:
        out, e = [], _StreamEvent()
        while _lib.qasr_stream_next_event(self._handle(), ctypes.byref(e)):
            out.append(StreamEvent(bool(e.is_final), _text(e.stable), _text(e.unstable), _text(e.language),
                                   e.audio_seconds))
        return out

    def interrupt(self) -> None:
        _lib.qasr_stream_interrupt(self._handle())

    def trailing_quiet_seconds(self) -> float:
        """Seconds of quiet since the last speech pushed (0 before any and while it lasts): hands-free dictation
        finishes once it passes a threshold."""
        return _lib.qasr_stream_trailing_quiet_seconds(self._handle())

    def finish(self) -> Result:
        out = ctypes.c_void_p()
        _check(_lib.qasr_stream_finish(self._handle(), ctypes.byref(out)))
        return Result._take(out)



class Aligner(_Owned):
    """A Qwen3-ForcedAligner checkpoint: the time of every word of a known transcript (word timestamps)."""
    _free_name, _what = "qasr_aligner_free", "aligner"

    def __init__(self, model_dir: Union[str, os.PathLike], *, threads: int = 0, device: Optional[str] = None,
                 compute: Optional[str] = None):
        p = _lib.qasr_default_load_params()
        p.n_threads, p.device, p.compute = threads, _bytes(device), _bytes(compute)
        h = ctypes.c_void_p()
        _check(_lib.qasr_aligner_load(os.fsencode(model_dir), ctypes.byref(p), ctypes.byref(h)))
        self._h = h

    def align(self, audio: Union[str, os.PathLike, Sequence[float]], text: str) -> Result:
        """The words of `text` with their times in `audio` (a file path or 16 kHz mono float samples): r.words."""
        h = self._handle()
        out = ctypes.c_void_p()
        t = text.encode("utf-8")
        if isinstance(audio, (str, os.PathLike)):
            status = _lib.qasr_align_file(h, os.fsencode(audio), t, ctypes.byref(out))
        else:
            keep, ptr, n = _floats(audio)
            status = _lib.qasr_align_pcm(h, ptr, n, t, ctypes.byref(out))  # keep: alive to here
        _check(status)
        return Result._take(out)
