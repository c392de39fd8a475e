// Raw model export -> GGUF (`snapkv convert`). The raw export is the project's training output
// format, a directory DIR holding:
//
//   DIR/config.json     {"architecture": "llama", "name": str, "context_length": int,
//                        "embedding_length": int, "block_count": int, "feed_forward_length": int,
//                        "head_count": int, "head_count_kv": int, "rope_freq_base": float,
//                        "rms_norm_eps": float, "vocab_size": int, optional
//                        "rope_scaling_factor": float (linear position interpolation; written as
//                        llama.rope.scaling.type "linear" and llama.rope.scaling.factor unless 1)}
//   DIR/tokenizer.json  {"model": "llama", "tokens": [str], "scores": [float],
//                        "token_types": [int: NORMAL 1, UNKNOWN 2, CONTROL 3, USER_DEFINED 4,
//                        UNUSED 5, BYTE 6], "bos_id": int, "eos_id": int, "unk_id": int,
//                        "add_bos": bool, "add_space_prefix": bool}
//   DIR/tensors/<gguf tensor name>.npy   float32, C order, numpy shape = reversed ggml ne, i.e. a
//                        torch Linear weight [out][in] as is: token_embd.weight [n_vocab][n_embd],
//                        blk.N.attn_q.weight [n_heads*hd][n_embd], attn_k/attn_v [n_kv*hd][n_embd],
//                        attn_output [n_embd][n_heads*hd], ffn_gate/ffn_up [n_ff][n_embd],
//                        ffn_down [n_embd][n_ff], norms [n_embd], optional output.weight
//                        [n_vocab][n_embd] (tied to token_embd when absent).
//   RoPE must already be llama.cpp's NORM convention (adjacent pairs); nothing is permuted here.
//
// The GGUF written is what llama.cpp loads: general.architecture "llama", general.name,
// general.alignment 32, general.file_type, llama.* hyper-parameters, tokenizer.ggml.* (model
// "llama", tokens, scores, token_type, bos/eos/unknown ids, add_bos_token, add_eos_token false,
// add_space_prefix), and the tensors under their GGUF names. Matrices are stored as `type`
// (Q8_0 needs rows of a multiple of 32 elements; other matrices fall back to F16 then, as
// llama.cpp's converter does); norm weights are always F32.
//
// Errors: a missing or ill-typed config/tokenizer field, an inconsistent value, a missing tensor,
// a tensor of the wrong shape ("got [a, b], expected [c, d]"), or a stray .npy that llama.cpp would
// refuse -> snapkv::RuntimeError naming the file and field.
#pragma once

#include <string>

#include "snapkv/gguf/gguf.h"

namespace snapkv {

// Builds the GGUF writer for the export in `dir` with matrices stored as `type` (f32, f16 or
// q8_0; std::invalid_argument for others).
gguf::Writer convert_export(const std::string& dir, gguf::TensorType type);

// convert_export(dir, type).write(out_path).
void convert_export_to_file(const std::string& dir, const std::string& out_path,
                            gguf::TensorType type);

}  // namespace snapkv
