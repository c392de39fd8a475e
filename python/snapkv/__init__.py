"""snapkv: KV-cache compression (SnapKV eviction, KIVI codecs, ...) and a GGUF engine, from Python.

Model level::

    import snapkv
    model = snapkv.load("models/snapkv-tiny4.gguf", threads=2)
    make_cache = snapkv.builder(method="snapkv", keep=0.2, codec="kivi2")
    out = model.generate("The pass key is 71432. ... What is the pass key?", cache=make_cache,
                         max_tokens=16)
    print(out.text, out.stats["bytes_stored"])
    for piece in model.generate(prompt, cache=make_cache, stream=True):
        print(piece, end="")
    doc = model.compress(document, snapkv.builder(method="kvzip", keep=0.2))
    doc.save("doc.kvc"); print(doc.ask("What is the pass key?"))
    doc = snapkv.load_cache(model, "doc.kvc")

Cache level (your own model code; float32 numpy arrays [n_kv_heads, S, head_dim])::

    caches = snapkv.build_caches((n_layers, n_heads, n_kv_heads, head_dim),
                                 snapkv.builder(budget=256))
    out = caches[l].attend(q, k, v)       # [n_heads, S, head_dim]
    caches[l].update(k, v, q_window)      # q_window: the chunk's last `window` queries, or None
    caches.end_prompt(); caches.stats(); caches[l].kept_positions(head)

Errors from the library keep its message: ValueError for bad arguments, shapes, dtypes and
options; snapkv.Error (a RuntimeError) for bad files and data met at run time.
"""

import inspect as _inspect

from . import _snapkv
from ._snapkv import (  # noqa: F401  (re-exported)
    Caches,
    CacheBuilder,
    Completion,
    Doc,
    Error,
    LayerCache,
    Model,
    Stream,
    build_caches,
    cache_options,
    load,
    load_cache,
    select,
    set_threads,
)

__version__ = _snapkv.__version__

_OPTIONS = _snapkv.cache_options()
# Options a method name sets (policy, codec, ...): None keeps what the name says.
_METHOD_GROUP = {o["name"] for o in _OPTIONS if o["group"] == "method"}
_ALIASES = {a: o["name"] for o in _OPTIONS for a in o["aliases"]}


def builder(method="snapkv", keep=None, budget=None, **options):
    """(generated below from the library's option table)"""
    for alias, name in _ALIASES.items():
        if alias in options:
            if name in options:
                raise ValueError(
                    f"[python] cache option given twice, got '{alias}' and '{name}', expected one"
                )
            options[name] = options.pop(alias)
    given = {k: v for k, v in options.items() if not (k in _METHOD_GROUP and v is None)}
    return CacheBuilder(method, keep, budget, given)


def _builder_signature():
    params = [
        _inspect.Parameter("method", _inspect.Parameter.POSITIONAL_OR_KEYWORD, default="snapkv"),
        _inspect.Parameter("keep", _inspect.Parameter.KEYWORD_ONLY, default=None),
        _inspect.Parameter("budget", _inspect.Parameter.KEYWORD_ONLY, default=None),
    ]
    lines = []
    for o in _OPTIONS:
        if o["group"] == "sizing":
            continue
        default = None if o["group"] == "method" else o["default"]
        if o["type"] == "int" and isinstance(default, float):
            default = int(default)  # the special value (-1: the codec's own default)
        params.append(_inspect.Parameter(o["name"], _inspect.Parameter.KEYWORD_ONLY, default=default))
        kind = "|".join(o["choices"]) if o["choices"] else o["type"]
        shown = "from the method" if o["group"] == "method" else repr(default)
        alias = f" (alias: {', '.join(o['aliases'])})" if o["aliases"] else ""
        cli = f" [--{o['flag']}]" if o["flag"] else ""
        lines.append(f"    {o['name']}: {kind} = {shown}{alias}{cli}\n        {o['help']}")
    return _inspect.Signature(params), "\n".join(lines)


_sig, _option_doc = _builder_signature()
builder.__signature__ = _sig
builder.__doc__ = f"""A cache factory: how to build KV caches for a prompt.

    make_cache = snapkv.builder(method="snapkv", keep=0.2, codec="kivi2", window=32)

method: the command line's --method grammar: full, snapkv (true window queries), snapkv-proxy
    (keys as queries), streaming, chunkkv, knorm, random, keydiff, expected_attention[-proxy],
    kvzip, kvzap, kvzap-snapkv, kvzap-proxy (kvzap's prior mixed with the window's attention,
    real queries or proxy keys; model-level calls; the model's snapkv train-scorer sidecar), the codecs (kivi2, kivi4, kivi2r, kivi4r, kitty, zipcache, gear, zipcacher, kivi42,
    kivi24, kivi42r, kivi32, kivimix), <policy>+<codec> (snapkv+kivi2); prefixes ada-, pyramid-,
    ada-pyramid-, and duo- before them (head types: duo-snapkv, duo-ada-kvzip; model-level calls;
    the model's snapkv find-heads sidecar).
keep: kept fraction of the prompt in (0, 1] (budget = max(ceil(keep * T), floor)), or
budget: rows kept per KV head (default {_snapkv.CacheBuilder().config()['budget']} when neither is given).

Every cache option, with the command line's names and defaults (the library's table, kv/core/spec.h):
{_option_doc}

Pass the result as cache= to Model.generate / chat / compress, or to build_caches(shape, ...).
Bad names or values raise ValueError with the library's message.
"""

__all__ = [
    "Caches",
    "CacheBuilder",
    "Completion",
    "Doc",
    "Error",
    "LayerCache",
    "Model",
    "Stream",
    "build_caches",
    "builder",
    "cache_options",
    "load",
    "load_cache",
    "select",
    "set_threads",
    "__version__",
]
