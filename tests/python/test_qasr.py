"""The Python bindings (bindings/python/qasr.py) on the demo model, through the built libqasr.so.
    QASR_LIBRARY=build/src/libqasr.so python3 tests/python/test_qasr.py      (ctest e2e.python; 77 = skipped)
QASR_TEST_DEVICE=cuda runs the models on the GPU (a CUDA build's library)."""
import array
import os
import re
import sys
import threading
import unittest
import wave

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEMO = os.path.join(ROOT, "models", "demo")
SAMPLES = os.path.join(ROOT, "samples")
DEVICE = os.environ.get("QASR_TEST_DEVICE") or None


def pcm(path):
    """16-bit mono WAV → (array('f') in [-1, 1), raw s16le bytes)."""
    with wave.open(path) as w:
        raw = w.readframes(w.getnframes())
    s = array.array("h", raw)
    return array.array("f", (x / 32768.0 for x in s)), raw


def expected(name):
    with open(os.path.join(SAMPLES, name + ".txt"), encoding="utf-8") as f:
        return f.read().strip()


class Bindings(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.model = qasr.Model(DEMO, threads=2, device=DEVICE)
        cls.en, cls.de = expected("demo_en"), expected("demo_de")

    @classmethod
    def tearDownClass(cls):
        cls.model.close()

    def test_version(self):
        self.assertRegex(qasr.version(), r"^\d+\.\d+\.\d+$")
        info = qasr.system_info()
        self.assertTrue(info.startswith("qasr " + qasr.version()), info)
        self.assertIn("\ncpu: ", info)

    def test_file_bytes_and_samples_agree(self):
        path = os.path.join(SAMPLES, "demo_en.wav")
        r = self.model.transcribe(path)
        self.assertEqual(r.text, self.en)
        self.assertEqual(r.language, "English")
        self.assertEqual(r.finish_reason, "eos")
        self.assertGreater(r.rtf, 0)
        self.assertAlmostEqual(r.audio_seconds, os.path.getsize(path) / 32000, delta=0.01)
        self.assertTrue(r.tokens and all(isinstance(i, int) and lp <= 0 for i, lp in r.tokens))
        with open(path, "rb") as f:
            self.assertEqual(self.model.transcribe(f.read()).text, self.en)
        samples, _ = pcm(path)
        self.assertEqual([t for t, _ in self.model.transcribe(samples).tokens], [t for t, _ in r.tokens])
        self.assertEqual(self.model.transcribe(list(samples)).text, self.en)  # any float sequence
        self.assertEqual(self.model.transcribe(os.path.join(SAMPLES, "demo_de.wav"), language="de").text, self.de)
        self.assertEqual(self.model.transcribe([]).finish_reason, "empty")  # under 400 samples: no model run

    def test_language_only(self):
        r = self.model.transcribe(os.path.join(SAMPLES, "demo_de.wav"), language_only=True)
        self.assertEqual((r.language, r.text), ("German", ""))
        self.assertGreater(r.language_probability, 0.5)
        self.assertLessEqual(len(r.tokens), 5)
        with self.assertRaises(qasr.Error):
            self.model.transcribe(os.path.join(SAMPLES, "demo_de.wav"), language_only=True, language="de")

    def test_beam_search(self):
        path = os.path.join(SAMPLES, "demo_de.wav")
        greedy = self.model.transcribe(path)
        for n in (2, 4):
            r = self.model.transcribe(path, beam_size=n)
            self.assertEqual(r.text, self.de)  # the demo model is sure of this one: every beam finds it
            self.assertEqual(r.finish_reason, "eos")
            self.assertEqual([t for t, _ in r.tokens], [t for t, _ in greedy.tokens])
        with self.assertRaises(qasr.Error):
            self.model.transcribe(path, beam_size=2, temperature=0.5)
        with self.assertRaises(qasr.Error):
            self.model.transcribe(path, beam_size=17)

    def test_segments_and_subtitles(self):
        en, _ = pcm(os.path.join(SAMPLES, "demo_en.wav"))
        de, _ = pcm(os.path.join(SAMPLES, "demo_de.wav"))
        audio = en + array.array("f", [0.0]) * 16000 + de
        seen = []
        r = self.model.transcribe(audio, segment_seconds=6, on_segment=seen.append)
        self.assertEqual([s.text for s in r.segments], [self.en, self.de])
        self.assertEqual(seen, r.segments)
        self.assertLess(r.segments[0].end, r.segments[1].start)
        self.assertTrue(r.srt.startswith("1\n00:00:0"), r.srt)
        self.assertTrue(r.vtt.startswith("WEBVTT"), r.vtt)
        # a part (from the pause between the samples): the German one alone, at its time in the whole audio
        off = len(en) / 16000 + 0.5
        part = self.model.transcribe(audio, segment_seconds=6, offset=off)
        self.assertEqual([s.text for s in part.segments], [self.de])
        self.assertAlmostEqual(part.segments[0].start, r.segments[1].start, delta=0.3)
        self.assertAlmostEqual(part.audio_seconds, len(audio) / 16000 - off, places=3)
        with self.assertRaises(qasr.Error):
            self.model.transcribe(audio, offset=100.0)

        def boom(_segment):
            raise KeyError("from the callback")
        with self.assertRaises(KeyError):
            self.model.transcribe(audio, segment_seconds=6, on_segment=boom)

    def test_aligner(self):
        """Word timestamps: a random-weight aligner (written by the qasr binary next to the library) times every word
        of a text, from a file and from samples alike; an ASR model is refused as an aligner."""
        import subprocess
        import tempfile
        lib = os.environ.get("QASR_LIBRARY", "")
        exe = os.environ.get("QASR_BIN") or os.path.join(os.path.dirname(os.path.dirname(lib)), "tools", "qasr")
        if not os.path.exists(exe):
            self.skipTest("no qasr binary to write the aligner checkpoint (QASR_BIN)")
        with tempfile.TemporaryDirectory() as d:
            subprocess.run([exe, "dev", "make-random", "--preset", "aligner-tiny", "--layout", "original",
                            "--tokenizer", DEMO, d], check=True, capture_output=True)
            with qasr.Aligner(d, threads=2, device=DEVICE) as al:
                wav = os.path.join(SAMPLES, "demo_en.wav")
                r = al.align(wav, "Hello, world! It's 你好.")
                self.assertEqual([w.text for w in r.words], ["Hello", "world", "It's", "你", "好"])
                # the repaired times never go back: start <= end <= the next word's start
                self.assertTrue(all(w.start <= w.end for w in r.words))
                self.assertTrue(all(a.end <= b.start for a, b in zip(r.words, r.words[1:])))
                samples, _ = pcm(wav)
                self.assertEqual(al.align(samples, "Hello, world! It's 你好.").words, r.words)
                self.assertEqual(al.align(samples, "...").words, [])
                # a transcription's words: the transcript's, from a file, bytes and samples alike
                t = self.model.transcribe(wav, aligner=al)
                self.assertEqual(t.text, self.en)
                self.assertEqual([w.text for w in t.words],
                                 [re.sub(r"[^\w']", "", x) for x in t.text.split() if re.sub(r"[^\w']", "", x)])
                with open(wav, "rb") as f:
                    self.assertEqual(self.model.transcribe(f.read(), aligner=al).words, t.words)
                self.assertEqual(self.model.transcribe(samples, aligner=al).words, t.words)
                self.assertEqual(self.model.transcribe(wav).words, [])
        with self.assertRaises(qasr.Error) as e:
            qasr.Aligner(DEMO)
        self.assertIn("not a forced aligner", str(e.exception))

    def test_abort(self):
        path = os.path.join(SAMPLES, "demo_en.wav")
        calls = []
        r = self.model.transcribe(path, abort=lambda: calls.append(1) and False)  # asked, never stopping
        self.assertEqual(r.text, self.en)
        asked = len(calls)
        self.assertGreater(asked, len(r.tokens))  # before every step, and the stages
        calls.clear()
        with self.assertRaises(qasr.Cancelled) as e:
            self.model.transcribe(path, abort=lambda: len(calls) >= asked // 2 or calls.append(1))
        self.assertEqual(e.exception.status, "cancelled")
        self.assertIsInstance(e.exception, qasr.Error)
        self.assertEqual(len(calls), asked // 2)  # not asked again once it answered True
        stop = threading.Event()  # a stop button from another thread
        stop.set()
        with self.assertRaises(qasr.Cancelled):
            self.model.transcribe(path, abort=stop.is_set)

        def broken():
            raise ValueError("from abort")
        with self.assertRaises(ValueError):  # an exception in abort stops the call and is raised
            self.model.transcribe(path, abort=broken)
        # an exception in on_segment stops the remaining pieces: one segment seen, not two
        en, _ = pcm(path)
        seen = []

        def first_only(s):
            seen.append(s)
            raise KeyError("enough")
        with self.assertRaises(KeyError):
            self.model.transcribe(en + array.array("f", [0.0]) * 16000 + en, segment_seconds=4, on_segment=first_only)
        self.assertEqual(len(seen), 1)
        self.assertEqual(self.model.transcribe(path).text, self.en)

    def test_text_as_it_is_written(self):
        path = os.path.join(SAMPLES, "demo_de.wav")
        deltas = []
        r = self.model.transcribe(path, on_text=deltas.append)
        self.assertEqual("".join(deltas), r.text)
        self.assertGreater(len(deltas), 3)

        # on_text_tokens: the same deltas, each with its tokens, in the result's order with its log-probabilities
        pairs = []
        r2 = self.model.transcribe(path, on_text_tokens=lambda d, t: pairs.append((d, t)))
        self.assertEqual([d for d, _ in pairs], deltas)
        self.assertTrue(all(t for _, t in pairs))
        given = [x for _, t in pairs for x in t]
        self.assertTrue(any(r2.tokens[k:k + len(given)] == given for k in range(len(r2.tokens))))

        def boom(_delta):
            raise KeyError("from on_text")
        with self.assertRaises(KeyError):  # stops the transcription, raised after it
            self.model.transcribe(path, on_text=boom)

    def test_progress(self):
        path = os.path.join(SAMPLES, "demo_de.wav")
        seen = []
        r = self.model.transcribe(path, on_progress=seen.append)
        self.assertEqual(r.text, self.model.transcribe(path).text)
        self.assertGreaterEqual(len(seen), 5)
        self.assertEqual((seen[0], seen[-1]), (0.0, 1.0))
        self.assertEqual(seen, sorted(seen))

        def boom(fraction):
            if fraction > 0.5:
                raise KeyError("from on_progress")
        with self.assertRaises(KeyError):  # stops the transcription, raised after it
            self.model.transcribe(path, on_progress=boom)

    def test_errors(self):
        with self.assertRaises(qasr.Error) as e:
            qasr.Model(os.path.join(ROOT, "no-such-model"))
        self.assertEqual(e.exception.status, "model")
        self.assertIn("no-such-model", str(e.exception))
        with self.assertRaises(qasr.Error) as e:
            self.model.transcribe(b"RIFF\x00\x00\x00\x00WAVEjunk")
        self.assertEqual(e.exception.status, "audio")
        with self.assertRaises(qasr.Error) as e:
            self.model.transcribe(os.path.join(SAMPLES, "demo_en.wav"), segment_seconds=1)
        self.assertEqual(e.exception.status, "invalid argument")
        with self.assertRaises(qasr.Error):
            self.model.transcribe(array.array("f", [0.0, float("nan")] * 4000))
        closed = qasr.Model(DEMO, device=DEVICE)
        closed.close()
        with self.assertRaises(ValueError):
            closed.transcribe(os.path.join(SAMPLES, "demo_en.wav"))
        # the model still serves after all of that
        self.assertEqual(self.model.transcribe(os.path.join(SAMPLES, "demo_en.wav")).text, self.en)

    def test_stream_equals_offline(self):
        samples, raw = pcm(os.path.join(SAMPLES, "demo_en.wav"))
        with self.model.open_stream(chunk_seconds=1.0) as st:
            for i in range(0, len(raw), 6400):
                st.push_s16le(raw[i:i + 6400])
            partial = st.events()
            final = st.finish()
        self.assertTrue(partial and not partial[-1].final)
        self.assertEqual(final.text, self.en)
        self.assertEqual((final.tokens, final.finish_reason), ([], "eos"))
        # logprobs=True: the final's tokens and language probability, as transcribe() gives them
        off = self.model.transcribe(samples)
        with self.model.open_stream(chunk_seconds=1.0, logprobs=True) as st:
            st.push(samples)
            final = st.finish()
        self.assertEqual([t for t, _ in final.tokens], [t for t, _ in off.tokens])
        for (_, a), (_, b) in zip(final.tokens, off.tokens):
            self.assertAlmostEqual(a, b, delta=1e-4)
        self.assertAlmostEqual(final.language_probability, off.language_probability, delta=1e-4)
        self.assertEqual([(s.first_token, s.n_tokens) for s in final.segments], [(0, len(off.tokens))])
        self.assertEqual([(s.first_token, s.n_tokens) for s in off.segments], [(0, len(off.tokens))])
        with self.model.open_stream() as st:
            self.assertEqual(st.trailing_quiet_seconds(), 0.0)
            st.push(samples)
            st.push(array.array("f", [0.0]) * 8000)  # half a second of silence after the speech
            self.assertGreaterEqual(st.trailing_quiet_seconds(), 0.5)
            st.interrupt()
            self.assertEqual(st.finish().text, self.en)
        # speculative=False: the final continues after the partials' stable text (finals alone get ITN: off here)
        with self.model.open_stream(chunk_seconds=0.5, speculative=False, itn=False, pause_seconds=0.3) as st:
            for i in range(0, len(raw), 3200):
                st.push_s16le(raw[i:i + 3200])
            stable = [e.stable for e in st.events() if not e.final][-1]
            final = st.finish()
        self.assertTrue(stable)
        self.assertTrue(final.text.startswith(stable), (stable, final.text))
        with self.assertRaises(qasr.Error):
            self.model.open_stream(pause_seconds=-1.0)
        # closing a model closes its open streams first (no use of a freed model)
        m = qasr.Model(DEMO, threads=2, device=DEVICE)
        st = m.open_stream()
        st.push(samples[:16000])
        m.close()
        with self.assertRaises(ValueError):
            st.push(samples[:1600])

    def test_threads_share_a_batched_model(self):
        with qasr.Model(DEMO, threads=2, max_batch=4, device=DEVICE) as m:
            paths = [os.path.join(SAMPLES, n + ".wav") for n in ("demo_en", "demo_de") * 3]
            got = [None] * len(paths)

            def work(i):
                got[i] = m.transcribe(paths[i]).text
            ts = [threading.Thread(target=work, args=(i,)) for i in range(len(paths))]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
        self.assertEqual(got, [self.en, self.de] * 3)


if __name__ == "__main__":
    if not os.path.exists(os.path.join(DEMO, "tokenizer.json")):
        print("SKIP: the demo model's tokenizer is not set up (scripts/setup_tokenizer.sh; cp .cache/qasr/tokenizer/* models/demo/)")
        sys.exit(77)
    sys.path.insert(0, os.path.join(ROOT, "bindings", "python"))
    import qasr  # noqa: E402
    unittest.main(verbosity=2)
