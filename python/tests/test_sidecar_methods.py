"""The methods that need more than the model's weights, from Python with the shipped model: duo-
(head types, models/snapkv-tiny4.heads.gguf), kvzap, kvzap-snapkv and kvzap-proxy (the learned
scorer, models/snapkv-tiny4.kvzap.gguf) and kvzip_plus (KVzip+) give `snapkv run`'s tokens, in the
method name or as keyword options (prior_weight as --prior-weight); a duo- document round-trips
through .kvc to `snapkv ask`; a copy of the model without its sidecars refuses duo-, kvzap and
kvzap-proxy with the library's message naming what is missing."""

import json
import shutil

import pytest

import snapkv
from conftest import run_cli


@pytest.mark.parametrize("method", ["duo-snapkv", "kvzap", "kvzip_plus", "duo-ada-kvzap",
                                    "kvzap-snapkv", "kvzap-proxy"])
def test_generate_same_tokens_as_cli_run(model, snapkv_bin, model_path, passkey, tmp_path, method):
    prompt, _ = passkey
    f = tmp_path / "prompt.txt"
    f.write_text(prompt)
    r = run_cli(snapkv_bin, "run", "--model", model_path, "--prompt-file", str(f), "--method",
                method, "--keep", "0.2", "--max-tokens", "8", "--json", "--quiet")
    cli = json.loads(r.stdout)
    out = model.generate(prompt, cache=snapkv.builder(method=method, keep=0.2), max_tokens=8)
    assert out.tokens == cli["tokens"]
    assert out.stats["bytes_stored"] == cli["kv_bytes"]


def test_prior_weight_keyword_equals_cli_flag(model, snapkv_bin, model_path, passkey, tmp_path):
    prompt, _ = passkey
    f = tmp_path / "prompt.txt"
    f.write_text(prompt)
    r = run_cli(snapkv_bin, "run", "--model", model_path, "--prompt-file", str(f), "--method",
                "kvzap-proxy", "--prior-weight", "0.2", "--keep", "0.1", "--max-tokens", "8",
                "--json", "--quiet")
    cli = json.loads(r.stdout)
    out = model.generate(prompt, cache=snapkv.builder(method="kvzap-proxy", prior_weight=0.2,
                                                      keep=0.1), max_tokens=8)
    assert out.tokens == cli["tokens"]
    assert out.stats["bytes_stored"] == cli["kv_bytes"]
    with pytest.raises(ValueError, match="prior_weight"):
        snapkv.builder(method="kvzap-proxy", prior_weight=1.5)


def test_duo_as_keywords_equals_the_method_name(model, passkey):
    prompt, answer = passkey
    named = model.generate(prompt, cache=snapkv.builder(method="duo-snapkv", keep=0.2),
                           max_tokens=8)
    keywords = model.generate(
        prompt, cache=snapkv.builder(method="snapkv", head_allocation="duo", keep=0.2),
        max_tokens=8)
    assert keywords.tokens == named.tokens
    assert keywords.stats["bytes_stored"] == named.stats["bytes_stored"]
    assert answer in named.text  # the shipped model retrieves the pass key with its head types


def test_duo_document_round_trips_to_cli_ask(model, snapkv_bin, model_path, passkey, tmp_path):
    prompt, _ = passkey
    doc_text = prompt[: prompt.rindex("What")]
    question = prompt[prompt.rindex("What"):]
    doc = model.compress(doc_text, snapkv.builder(method="duo-snapkv", keep=0.2))
    assert doc.config["head_allocation"] == "duo"
    path = tmp_path / "duo.kvc"
    doc.save(str(path))
    r = run_cli(snapkv_bin, "ask", "--model", model_path, "--cache", str(path), "--question",
                question, "--json")
    assert doc.ask(question) == json.loads(r.stdout)["answers"][0]["text"]


def test_model_without_sidecars_refuses_by_name(model_path, passkey, tmp_path, monkeypatch):
    monkeypatch.delenv("SNAPKV_HEADS", raising=False)
    monkeypatch.delenv("SNAPKV_KVZAP", raising=False)
    bare_path = tmp_path / "bare.gguf"
    shutil.copyfile(model_path, bare_path)
    bare = snapkv.load(str(bare_path), threads=2)
    prompt, _ = passkey
    with pytest.raises(ValueError, match="needs head types") as e:
        bare.generate(prompt, cache=snapkv.builder(method="duo-snapkv", keep=0.2), max_tokens=2)
    assert str(tmp_path / "bare.heads.gguf") in str(e.value)
    assert "snapkv find-heads" in str(e.value)
    with pytest.raises(ValueError, match="needs head types"):
        bare.compress(prompt, snapkv.builder(method="snapkv", head_allocation="duo", keep=0.2))
    with pytest.raises(ValueError, match="needs scorer weights") as e:
        bare.compress(prompt, snapkv.builder(method="kvzap", keep=0.2))
    assert str(tmp_path / "bare.kvzap.gguf") in str(e.value)
    with pytest.raises(ValueError, match="policy kvzap_snapkv needs scorer weights") as e:
        bare.compress(prompt, snapkv.builder(method="kvzap-proxy", keep=0.2))
    assert str(tmp_path / "bare.kvzap.gguf") in str(e.value)
    # Other methods still work with this model.
    assert bare.generate(prompt, cache=snapkv.builder(method="kvzip_plus", keep=0.2),
                         max_tokens=2).tokens
