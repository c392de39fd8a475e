"""Model level: generate / stream / tokenize against `snapkv run`, .kvc both ways with `snapkv
ask`, errors with the library's messages, and memory over many generate calls."""

import json
import resource

import pytest

import snapkv
from conftest import run_cli


@pytest.mark.parametrize(
    "method,cli_args,options",
    [
        ("snapkv", ["--keep", "0.2"], dict(keep=0.2)),
        ("snapkv+kivi2", ["--keep", "0.1", "--window", "16", "--pool", "max", "--kernel", "7"],
         dict(keep=0.1, window=16, pool="max", kernel=7)),
        ("streaming", ["--budget", "64"], dict(budget=64)),
    ],
)
def test_generate_same_tokens_as_cli_run(model, snapkv_bin, model_path, passkey, tmp_path,
                                         method, cli_args, options):
    prompt, answer = passkey
    f = tmp_path / "prompt.txt"
    f.write_text(prompt)
    r = run_cli(snapkv_bin, "run", "--model", model_path, "--prompt-file", str(f), "--method",
                method, *cli_args, "--max-tokens", "12", "--json", "--quiet")
    cli = json.loads(r.stdout)
    out = model.generate(prompt, cache=snapkv.builder(method=method, **options), max_tokens=12)
    assert out.tokens == cli["tokens"]
    assert out.text == cli["text"]
    assert out.stats["bytes_stored"] == cli["kv_bytes"]
    assert out.stats["bytes_full_fp16"] == cli["kv_bytes_full_fp16"]
    assert out.stats["prompt_tokens"] == cli["prompt_tokens"]
    if method == "snapkv":
        assert answer in out.text  # the shipped model retrieves the pass key at keep 0.2


def test_stream_yields_the_same_text(model, passkey):
    prompt, _ = passkey
    make_cache = snapkv.builder(method="snapkv", keep=0.2)
    full = model.generate(prompt, cache=make_cache, max_tokens=10)
    stream = model.generate(prompt, cache=make_cache, max_tokens=10, stream=True)
    pieces = list(stream)
    assert "".join(pieces) == full.text
    assert stream.result.tokens == full.tokens
    assert len(pieces) >= 2


def test_stop_strings_cut_the_text(model, passkey):
    prompt, answer = passkey
    full = model.generate(prompt, max_tokens=10)
    stop = answer[2:4]
    assert stop in full.text
    out = model.generate(prompt, max_tokens=10, stop=[stop])
    assert out.finish_reason == "stop"
    assert out.text == full.text[: full.text.index(stop)]
    streamed = "".join(model.generate(prompt, max_tokens=10, stop=[stop], stream=True))
    assert streamed == out.text


def test_sampling_options_and_logprobs(model, passkey):
    prompt, _ = passkey
    out = model.generate(prompt, max_tokens=6, top_logprobs=3)
    assert len(out.logprobs) == len(out.tokens)
    for t, tok in zip(out.logprobs, out.tokens):
        assert t["id"] == tok and t["logprob"] <= 0.0 and len(t["top"]) == 3
        assert t["top"][0][0] == tok  # greedy: the most likely token
    a = model.generate(prompt, max_tokens=8, temperature=0.9, top_k=20, min_p=0.05, seed=5,
                       repeat_penalty=1.1)
    b = model.generate(prompt, max_tokens=8, temperature=0.9, top_k=20, min_p=0.05, seed=5,
                       repeat_penalty=1.1)
    assert a.tokens == b.tokens  # a seed gives the same tokens
    with pytest.raises(ValueError, match="min_p"):
        model.generate(prompt, min_p=2.0)


def test_ctrl_c_interrupts_a_generate(model):
    import _thread
    import threading
    import time
    prompt = "There is an important info hidden. " * 60
    t0 = time.monotonic()
    model.generate(prompt, max_tokens=1500, ignore_eos=True)
    full = time.monotonic() - t0
    # SIGINT 50 ms into the same generation: the call ends at the next token, long before the
    # generation would (without the check, Python would only see it once the call returned).
    timer = threading.Timer(0.05, _thread.interrupt_main)
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        timer.start()
        model.generate(prompt, max_tokens=1500, ignore_eos=True)
    stopped = time.monotonic() - t0
    timer.join()
    assert stopped < 0.5 * full, f"interrupted after {stopped:.3f} s of a {full:.3f} s generation"
    out = model.generate(prompt, max_tokens=4)  # the model is usable afterwards
    assert len(out.tokens) >= 1


def test_tokenize_matches_cli(model, snapkv_bin, model_path):
    text = "The pass key is 71432. Remember it."
    r = run_cli(snapkv_bin, "tokenize", "--model", model_path, "--text", text)
    ids = model.tokenize(text)
    assert ids == json.loads(r.stdout)
    assert model.detokenize(ids) == text
    assert model.shape == (4, 4, 2, 32)


def test_kvc_written_by_python_is_read_by_cli_and_back(model, snapkv_bin, model_path, passkey,
                                                        tmp_path):
    prompt, answer = passkey
    doc_text = prompt[: prompt.rindex("What")]
    question = prompt[prompt.rindex("What"):]
    doc = model.compress(doc_text, snapkv.builder(method="snapkv", keep=0.3))
    path = tmp_path / "py.kvc"
    doc.save(str(path))
    r = run_cli(snapkv_bin, "ask", "--model", model_path, "--cache", str(path), "--question",
                question, "--json")
    cli_answer = json.loads(r.stdout)["answers"][0]["text"]
    py_answer = doc.ask(question)
    assert py_answer == cli_answer
    # ... and a file from `snapkv compress` answered by Python.
    doc_file = tmp_path / "doc.txt"
    doc_file.write_text(doc_text)
    cli_kvc = tmp_path / "cli.kvc"
    run_cli(snapkv_bin, "compress", "--model", model_path, "--prompt-file", str(doc_file),
            "--method", "kvzip", "--keep", "0.2", "--out", str(cli_kvc))
    loaded = snapkv.load_cache(model, str(cli_kvc))
    r = run_cli(snapkv_bin, "ask", "--model", model_path, "--cache", str(cli_kvc), "--question",
                question, "--json")
    assert loaded.ask(question) == json.loads(r.stdout)["answers"][0]["text"]
    assert loaded.config["policy"] == "kvzip"
    assert loaded.stats["file_bytes"] > 0


def test_kvc_for_another_model_is_refused(model, tmp_path):
    from pathlib import Path
    # A .kvc whose fingerprint is wrong: flip bytes of the header's model fingerprint by writing
    # a file for this model and loading it with a different GGUF (a copy with one byte changed).
    doc = model.compress("The pass key is 12345. " * 20, snapkv.builder(budget=32))
    kvc = tmp_path / "a.kvc"
    doc.save(str(kvc))
    other = tmp_path / "other.gguf"
    data = bytearray(Path(model.path).read_bytes())
    at = data.index(b"snapkv-r11")  # general.name: same shapes, another header fingerprint
    data[at] = ord("S")
    other.write_bytes(bytes(data))
    other_model = snapkv.load(str(other))
    with pytest.raises(snapkv.Error, match="another model|fingerprint"):
        snapkv.load_cache(other_model, str(kvc))
    with pytest.raises(snapkv.Error):
        snapkv.load_cache(model, str(tmp_path / "missing.kvc"))


def test_bad_input_raises_with_the_library_message(model, snapkv_bin, model_path):
    with pytest.raises(ValueError, match="unknown cache option"):
        snapkv.builder(windw=3)
    with pytest.raises(ValueError, match="unknown method"):
        snapkv.builder(method="snapkvv")
    with pytest.raises(ValueError, match="kernel"):
        snapkv.builder(kernel=4)  # even
    with pytest.raises(ValueError, match="keep and budget both"):
        snapkv.builder(keep=0.2, budget=8)
    with pytest.raises(ValueError, match="window"):
        snapkv.builder(window=-1)
    with pytest.raises(ValueError, match="pool"):
        snapkv.builder(pool="maximum")
    with pytest.raises(ValueError, match="empty prompt"):
        model.generate("", max_tokens=2)
    with pytest.raises(ValueError, match="context"):
        model.generate([5] * 3000, max_tokens=2)
    with pytest.raises(ValueError, match="token id"):
        model.generate([1, 99999], max_tokens=2)
    with pytest.raises(ValueError, match="temperature"):
        model.generate("hi", temperature=-1.0)
    with pytest.raises(RuntimeError, match="chat_template"):
        model.chat([{"role": "user", "content": "hi"}])
    with pytest.raises(snapkv.Error):
        snapkv.load("/nonexistent.gguf")
    # The message is the command line's, word for word.
    r = run_cli(snapkv_bin, "run", "--model", model_path, "--prompt", "x", "--kernel", "4",
                check=False)
    with pytest.raises(ValueError) as e:
        snapkv.builder(kernel=4)
    assert str(e.value) in r.stderr


def test_builder_lists_every_option_with_its_default():
    doc = snapkv.builder.__doc__
    import inspect
    params = inspect.signature(snapkv.builder).parameters
    for o in snapkv.cache_options():
        if o["group"] == "sizing":
            continue
        assert o["name"] in params
        assert o["name"] in doc
    assert params["window"].default == 32
    assert params["pool"].default == "causal_max"
    b = snapkv.builder(method="snapkv", keep=0.2, codec="kivi2", sinks=2)
    cfg = b.config(1000)
    assert cfg["codec"] == "kivi2" and cfg["n_sink"] == 2 and cfg["budget"] == 200


def test_stream_stopped_early_does_not_leak(model, passkey):
    prompt, _ = passkey
    make_cache = snapkv.builder(method="snapkv+kivi2", keep=0.2)

    def rss_kib():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * resource.getpagesize() // 1024

    for _ in range(20):  # warm-up: allocator pools, page cache of the mapped weights
        for i, _piece in enumerate(model.generate(prompt, cache=make_cache, stream=True)):
            if i == 2:
                break
    before = rss_kib()
    for _ in range(200):
        for i, _piece in enumerate(model.generate(prompt, cache=make_cache, max_tokens=8,
                                                  stream=True)):
            if i == 2:
                break
    after = rss_kib()
    assert after - before < 8 * 1024, f"RSS grew by {after - before} KiB over 200 generates"


def test_logit_bias_and_ignore_eos(model):
    prompt = "Once upon a time"
    first = model.generate(prompt, max_tokens=1).tokens[0]
    # A ban moves the greedy first token; a +100 bias on the end token ends at once, and
    # ignore_eos bans it again so the same call runs to max_tokens.
    banned = model.generate(prompt, max_tokens=1, logit_bias={first: float("-inf")})
    assert banned.tokens[0] != first
    eos = model.tokenize("</s>", add_special=False, parse_special=True)
    assert len(eos) == 1, "the tiny model's end token is </s>"
    ends = model.generate(prompt, max_tokens=6, logit_bias={eos[0]: 100.0})
    assert ends.finish_reason == "stop" and ends.tokens == []
    runs = model.generate(prompt, max_tokens=6, logit_bias={eos[0]: 100.0}, ignore_eos=True)
    assert runs.finish_reason == "length" and len(runs.tokens) == 6
    with pytest.raises(ValueError, match="outside the vocabulary"):
        model.generate(prompt, max_tokens=1, logit_bias={model.config["n_vocab"]: 1.0})
    with pytest.raises(ValueError, match="not a number"):
        model.generate(prompt, max_tokens=1, logit_bias={1: float("nan")})
