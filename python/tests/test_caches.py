"""Cache level on numpy arrays: build_caches + attend/update against a numpy reference of
attention over the kept rows, select against `snapkv select` on the same .npy files, and every
bad input (dtype, rank, shape, contiguity, NaN, options) raising ValueError."""

import json

import numpy as np
import pytest

import snapkv
from conftest import run_cli

N_LAYERS, N_HEADS, N_KV, HD = 2, 4, 2, 16


def attention_reference(q, keys, values, positions, q_positions):
    """softmax(q k^T / sqrt(d)) v over the rows at `positions` (causal by position), per head."""
    n_heads, s, hd = q.shape
    group = n_heads // len(keys)
    out = np.zeros_like(q, dtype=np.float64)
    for h in range(n_heads):
        kh, vh, ph = keys[h // group], values[h // group], positions[h // group]
        for i in range(s):
            mask = ph <= q_positions[i]
            logits = kh[mask].astype(np.float64) @ q[h, i].astype(np.float64) / np.sqrt(hd)
            w = np.exp(logits - logits.max())
            out[h, i] = (w / w.sum()) @ vh[mask].astype(np.float64)
    return out


def test_attend_equals_numpy_attention_over_the_kept_rows():
    rng = np.random.default_rng(3)
    caches = snapkv.build_caches((N_LAYERS, N_HEADS, N_KV, HD),
                                 snapkv.builder(method="snapkv", budget=24, window=8))
    assert len(caches) == N_LAYERS and caches.shape == (N_LAYERS, N_HEADS, N_KV, HD)
    s = 96
    for layer in range(N_LAYERS):
        c = caches[layer]
        q = rng.standard_normal((N_HEADS, s, HD), dtype=np.float32)
        k = rng.standard_normal((N_KV, s, HD), dtype=np.float32)
        v = rng.standard_normal((N_KV, s, HD), dtype=np.float32)
        out = c.attend(q, k, v)  # empty cache: plain causal attention over the chunk
        ref = attention_reference(q, k, v, [np.arange(s)] * N_KV, np.arange(s))
        np.testing.assert_allclose(out, ref, rtol=2e-4, atol=2e-5)
        c.update(k, v, q[:, -8:, :].copy())
    caches.end_prompt()
    st = caches.stats()
    assert st["tokens_seen"] == s and st["tokens_kept"] == 24
    # A decode step attends over exactly the kept rows (stored in fp16) plus itself.
    for layer in range(N_LAYERS):
        c = caches[layer]
        q = rng.standard_normal((N_HEADS, 1, HD), dtype=np.float32)
        k = rng.standard_normal((N_KV, 1, HD), dtype=np.float32)
        v = rng.standard_normal((N_KV, 1, HD), dtype=np.float32)
        pos = [c.kept_positions(h) for h in range(N_KV)]
        assert all(len(p) == 24 and np.all(np.diff(p) > 0) for p in pos)
        keys = [np.concatenate([c.keys(h), k[h]]) for h in range(N_KV)]
        values = [np.concatenate([c.values(h), v[h]]) for h in range(N_KV)]
        positions = [np.append(p, s) for p in pos]
        out = c.attend(q, k, v)
        ref = attention_reference(q, keys, values, positions, [s])
        np.testing.assert_allclose(out, ref, rtol=2e-4, atol=2e-5)
        c.update(k, v)
        assert c.offset == s + 1


def test_config_as_string_and_dict():
    a = snapkv.build_caches((1, 2, 2, 8), "policy=streaming budget=16 sinks=2")
    b = snapkv.build_caches((1, 2, 2, 8), {"policy": "streaming", "budget": 16, "n_sink": 2})
    rng = np.random.default_rng(1)
    k = rng.standard_normal((2, 40, 8), dtype=np.float32)
    for c in (a, b):
        c[0].update(k, k)
        c.end_prompt()
    assert list(a[0].kept_positions(0)) == list(b[0].kept_positions(0))
    assert list(a[0].kept_positions(0))[:2] == [0, 1]
    # The C ABI's method= and keep= keys, as the builder's.
    c = snapkv.build_caches((1, 2, 2, 8), "method=streaming keep=0.25 sinks=2", prompt_tokens=40)
    d = snapkv.build_caches((1, 2, 2, 8), snapkv.builder(method="streaming", keep=0.25, n_sink=2),
                            prompt_tokens=40)
    for x in (c, d):
        x[0].update(k, k)
        x.end_prompt()
    assert list(c[0].kept_positions(1)) == list(d[0].kept_positions(1))
    assert len(c[0].kept_positions(1)) == 10


@pytest.mark.parametrize("with_queries", [False, True])
def test_select_equals_cli_select(tmp_path, snapkv_bin, with_queries):
    rng = np.random.default_rng(11)
    keys = rng.standard_normal((2, 200, 32), dtype=np.float32)
    np.save(tmp_path / "K.npy", keys)
    args = ["select", "--keys", str(tmp_path / "K.npy"), "--budget", "40", "--sinks", "2",
            "--pool", "max", "--kernel", "5"]
    queries = None
    if with_queries:
        queries = rng.standard_normal((4, 16, 32), dtype=np.float32)
        np.save(tmp_path / "Q.npy", queries)
        args += ["--queries", str(tmp_path / "Q.npy")]
    cli = json.loads(run_cli(snapkv_bin, *args).stdout)
    py = snapkv.select(keys, queries, budget=40, options=dict(n_sink=2, pool="max", kernel=5))
    assert [list(map(int, p)) for p in py["kept"]] == cli["kept"]
    for a, b in zip(py["scores"], cli["scores"]):
        np.testing.assert_allclose(a, np.asarray(b, dtype=np.float32), rtol=1e-6, atol=1e-9)


def test_bad_arrays_raise_value_errors_naming_the_argument():
    c = snapkv.build_caches((1, 4, 2, 16), snapkv.builder(budget=8))[0]
    good = np.zeros((2, 3, 16), dtype=np.float32)
    with pytest.raises(ValueError, match=r"k: dtype.*float64.*float32"):
        c.update(np.zeros((2, 3, 16)), good)
    with pytest.raises(ValueError, match=r"v: dtype.*int64"):
        c.update(good, np.zeros((2, 3, 16), dtype=np.int64))
    with pytest.raises(ValueError, match=r"k: shape.*\(2, 3\).*n_kv_heads=2, S, head_dim=16"):
        c.update(np.zeros((2, 3), dtype=np.float32), good)
    with pytest.raises(ValueError, match=r"k: shape.*\(3, 3, 16\)"):
        c.update(np.zeros((3, 3, 16), dtype=np.float32), good)
    with pytest.raises(ValueError, match=r"v: shape.*\(2, 4, 16\).*S=3"):
        c.update(good, np.zeros((2, 4, 16), dtype=np.float32))
    with pytest.raises(ValueError, match="not C-contiguous"):
        c.update(np.zeros((2, 16, 3), dtype=np.float32).transpose(0, 2, 1), good)
    with pytest.raises(ValueError, match="q_window: shape"):
        c.update(good, good, np.zeros((2, 2, 16), dtype=np.float32))
    with pytest.raises(ValueError, match="not a numpy array"):
        c.update([[0.0]], good)
    bad = good.copy()
    bad[1, 2, 3] = np.nan
    with pytest.raises(ValueError, match="finite|NaN|nan"):
        c.update(bad, good)
    with pytest.raises(ValueError, match="finite|NaN|nan"):
        c.attend(np.zeros((4, 3, 16), dtype=np.float32), bad, good)
    assert c.offset == 0  # nothing was stored by the failed calls
    with pytest.raises(ValueError, match="head"):
        c.kept_positions(2)
    with pytest.raises(ValueError, match="multiple of n_kv_heads"):
        snapkv.build_caches((1, 3, 2, 16), "budget=8")  # n_heads % n_kv_heads
    with pytest.raises(ValueError, match="shape"):
        snapkv.build_caches((1, 4, 2), "budget=8")
    with pytest.raises(ValueError, match="unknown"):
        snapkv.build_caches((1, 4, 2, 16), "budgt=8")
    with pytest.raises(ValueError, match="keep without a prompt length"):
        snapkv.build_caches((1, 4, 2, 16), snapkv.builder(keep=0.2))
    with pytest.raises(ValueError, match="keys: dtype"):
        snapkv.select(np.zeros((2, 10, 8)))
    with pytest.raises(ValueError, match="queries: shape"):
        snapkv.select(np.zeros((2, 10, 8), dtype=np.float32),
                      np.zeros((3, 4, 8), dtype=np.float32))
