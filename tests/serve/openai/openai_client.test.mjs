// `snapkv serve` driven by the official `openai` npm client: completions, chat, streaming, n,
// stop, logprobs, echo, usage and the snapkv accounting, API keys and errors. Started by ctest
// (serve.openai_client) through run.sh, which passes the snapkv binary and the model in SNAPKV_BIN and SNAPKV_MODEL.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import OpenAI from 'openai';

const snapkv = process.env.SNAPKV_BIN;
const model = process.env.SNAPKV_MODEL;
const servers = [];

// Starts `snapkv serve` on a free loopback port; resolves to {port, proc} once it listens.
function serve(extra = []) {
  return new Promise((resolve, reject) => {
    const proc = spawn(snapkv, ['serve', '--model', model, '--port', '0', '--no-chat',
                                '--quiet-requests', ...extra],
                       { stdio: ['ignore', 'ignore', 'pipe'] });
    servers.push(proc);
    let log = '';
    const timer = setTimeout(() => reject(new Error('server did not start: ' + log)), 30000);
    proc.stderr.on('data', (d) => {
      log += d;
      const m = log.match(/listening on http:\/\/127\.0\.0\.1:(\d+)/);
      if (m) { clearTimeout(timer); resolve({ port: Number(m[1]), proc }); }
    });
    proc.on('exit', (code) => reject(new Error(`server exited ${code}: ${log}`)));
  });
}

const client = (port, apiKey = 'unused') =>
  new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey, maxRetries: 0, timeout: 60000 });

let port, openai;
before(async () => { ({ port } = await serve()); openai = client(port); });
after(() => { for (const p of servers) p.kill('SIGTERM'); });

test('models lists the file name and general.name; any model name is served', async () => {
  const ids = [];
  for await (const m of openai.models.list()) ids.push(m.id);
  assert.ok(ids.includes(model.split('/').pop()), ids.join(','));
  assert.ok(ids.length >= 1);
  const r = await openai.completions.create({ model: 'gpt-3.5-turbo-instruct', prompt: 'Hi', max_tokens: 2 });
  assert.equal(r.model, 'gpt-3.5-turbo-instruct');
});

test('completions: text, usage without an extra BOS, snapkv accounting', async () => {
  const prompt = 'The pass key is 48213. The pass key is';
  const r = await openai.completions.create({ model: 'm', prompt, max_tokens: 5 });
  assert.equal(r.object, 'text_completion');
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(r.usage.completion_tokens, 5);
  const tok = await fetch(`http://127.0.0.1:${port}/tokenize`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ content: prompt }) }).then((x) => x.json());
  assert.equal(r.usage.prompt_tokens, tok.tokens.length);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + 5);
  const s = r.snapkv;
  assert.equal(s.method, 'snapkv');
  assert.ok(s.kv_bytes > 0 && s.kv_bytes <= s.kv_bytes_full_fp16, JSON.stringify(s));
  assert.ok(s.rows_kept > 0 && s.rows_kept <= s.rows_seen, JSON.stringify(s));
  assert.equal(s.reused, false);
  const detok = await fetch(`http://127.0.0.1:${port}/detokenize`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ tokens: tok.tokens }) }).then((x) => x.json());
  assert.ok(detok.content.endsWith(prompt), detok.content);
});

test('completions: echo, a list prompt, stop', async () => {
  const prompt = 'Once upon a time';
  const full = await openai.completions.create({ model: 'm', prompt, max_tokens: 12 });
  const text = full.choices[0].text;
  const echoed = await openai.completions.create({ model: 'm', prompt, max_tokens: 12, echo: true });
  assert.equal(echoed.choices[0].text, prompt + text);
  const two = await openai.completions.create({ model: 'm', prompt: [prompt, 'Hello'], max_tokens: 3 });
  assert.deepEqual(two.choices.map((c) => c.index), [0, 1]);
  assert.equal(two.choices[0].text, (await openai.completions.create({ model: 'm', prompt, max_tokens: 3 })).choices[0].text);
  // A stop string from the middle of the greedy answer: the text ends before it.
  const chars = [...text];
  assert.ok(chars.length >= 4, 'the greedy answer is long enough: ' + JSON.stringify(text));
  const stop = chars.slice(2, 4).join('');
  const stopped = await openai.completions.create({ model: 'm', prompt, max_tokens: 12, stop: [stop] });
  assert.equal(stopped.choices[0].finish_reason, 'stop');
  assert.equal(stopped.choices[0].text, text.slice(0, text.indexOf(stop)));
});

test('chat: developer and system roles, content parts, name, max_completion_tokens', async () => {
  const r = await openai.chat.completions.create({
    model: 'gpt-4o',
    messages: [
      { role: 'developer', content: 'Answer briefly.' },
      { role: 'user', name: 'ann', content: [{ type: 'text', text: 'What is ' }, { type: 'text', text: 'the key?' }] },
    ],
    max_completion_tokens: 4, temperature: 0, top_p: 1, presence_penalty: 0.5, frequency_penalty: 0.5,
    seed: 7, user: 'u1', metadata: { a: 'b' }, store: false, response_format: { type: 'text' },
    tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object', properties: {} } } }],
    tool_choice: 'auto', parallel_tool_calls: false, logit_bias: {}, top_k: 40, min_p: 0.05,
  });
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(typeof r.choices[0].message.content, 'string');
  assert.equal(r.usage.completion_tokens <= 4, true);
  assert.ok(['stop', 'length'].includes(r.choices[0].finish_reason));
});

test('chat streaming: role first, content equals the plain answer, usage chunk last', async () => {
  const messages = [{ role: 'user', content: 'Tell me a story' }];
  const plain = await openai.chat.completions.create({ model: 'm', messages, max_tokens: 8 });
  const stream = await openai.chat.completions.create({
    model: 'm', messages, max_tokens: 8, stream: true, stream_options: { include_usage: true } });
  const chunks = [];
  for await (const c of stream) chunks.push(c);
  assert.equal(chunks[0].choices[0].delta.role, 'assistant');
  const content = chunks.map((c) => c.choices[0]?.delta?.content ?? '').join('');
  assert.equal(content, plain.choices[0].message.content);
  const finishes = chunks.map((c) => c.choices[0]?.finish_reason).filter(Boolean);
  assert.deepEqual(finishes, [plain.choices[0].finish_reason]);
  const fin = chunks.find((c) => c.choices[0]?.finish_reason);
  assert.ok(fin.snapkv.kv_bytes > 0 && fin.snapkv.kv_bytes <= fin.snapkv.kv_bytes_full_fp16, JSON.stringify(fin));
  const last = chunks.at(-1);
  assert.deepEqual(last.choices, []);
  assert.deepEqual(last.usage, plain.usage);
});

test('completions streaming joins to the plain text', async () => {
  const plain = await openai.completions.create({ model: 'm', prompt: 'Hello there', max_tokens: 8 });
  const stream = await openai.completions.create({ model: 'm', prompt: 'Hello there', max_tokens: 8, stream: true });
  let text = '';
  for await (const c of stream) text += c.choices[0]?.text ?? '';
  assert.equal(text, plain.choices[0].text);
});

test('n choices from one prefill; sampled with a seed they repeat', async () => {
  const args = { model: 'm', messages: [{ role: 'user', content: 'Hi' }], max_tokens: 6, n: 3, temperature: 1.0, seed: 11 };
  const a = await openai.chat.completions.create(args);
  const b = await openai.chat.completions.create(args);
  assert.deepEqual(a.choices.map((c) => c.index), [0, 1, 2]);
  assert.deepEqual(a.choices.map((c) => c.message.content), b.choices.map((c) => c.message.content));
  assert.ok(a.usage.completion_tokens >= 3 && a.usage.completion_tokens <= 18, JSON.stringify(a.usage));
  const texts = new Set(a.choices.map((c) => c.message.content));
  assert.ok(texts.size > 1, 'three samples at temperature 1 all equal: ' + [...texts]);
  const stream = await openai.chat.completions.create({ ...args, stream: true });
  const per = ['', '', ''];
  for await (const c of stream) for (const ch of c.choices) per[ch.index] += ch.delta?.content ?? '';
  assert.deepEqual(per, a.choices.map((c) => c.message.content));
});

test('logprobs: chat top_logprobs and completions logprobs', async () => {
  const r = await openai.chat.completions.create({
    model: 'm', messages: [{ role: 'user', content: 'Hi' }], max_tokens: 3, logprobs: true, top_logprobs: 2 });
  const lp = r.choices[0].logprobs.content;
  assert.equal(lp.length, r.usage.completion_tokens);
  for (const t of lp) {
    assert.ok(t.logprob <= 0);
    assert.equal(t.top_logprobs.length, 2);
    assert.ok(t.top_logprobs[0].logprob >= t.logprob - 1e-9, 'greedy picks the most likely');
  }
  const c = await openai.completions.create({ model: 'm', prompt: 'Hi', max_tokens: 3, logprobs: 3 });
  const l = c.choices[0].logprobs;
  assert.equal(l.tokens.length, 3);
  assert.equal(l.token_logprobs.length, 3);
  assert.equal(Object.keys(l.top_logprobs[0]).length <= 3, true);
});

test('errors arrive as the client\'s typed errors', async () => {
  await assert.rejects(openai.completions.create({ model: 'm', prompt: 'Hi', n: 100 }),
                       (e) => e instanceof OpenAI.BadRequestError && /max-n/.test(e.message));
  await assert.rejects(openai.completions.create({ model: 'm', prompt: 'Hi', max_tokens: 1e9 }),
                       (e) => e instanceof OpenAI.BadRequestError);
  await assert.rejects(openai.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'x' }],
                                                        tool_choice: 'required', tools: [] }),
                       (e) => e instanceof OpenAI.BadRequestError && /tool/.test(e.message));
  await assert.rejects(openai.completions.create({ model: 'm', prompt: 'Hi', cache_id: 'cache-none' }),
                       (e) => e instanceof OpenAI.NotFoundError);
  await assert.rejects(openai.chat.completions.create({ model: 'm', messages: [] }),
                       (e) => e instanceof OpenAI.BadRequestError);
});

test('--api-key: 401 without the key, served with it, /health open', async () => {
  const { port: p } = await serve(['--api-key', 'sesame']);
  await assert.rejects(client(p, 'wrong').completions.create({ model: 'm', prompt: 'Hi', max_tokens: 1 }),
                       (e) => e instanceof OpenAI.AuthenticationError);
  const ok = await client(p, 'sesame').completions.create({ model: 'm', prompt: 'Hi', max_tokens: 1 });
  assert.equal(ok.choices.length, 1);
  assert.equal((await fetch(`http://127.0.0.1:${p}/health`)).status, 200);
  assert.equal((await fetch(`http://127.0.0.1:${p}/metrics`)).status, 401);
});

test('SIGTERM during a stream: the server exits within 2 s', async () => {
  const { port: p, proc } = await serve();
  const stream = await client(p).completions.create({ model: 'm', prompt: 'Once', max_tokens: 1500, stream: true });
  const it = stream[Symbol.asyncIterator]();
  await it.next();  // generating
  const exited = new Promise((resolve) => proc.on('exit', (code, signal) => resolve({ code, signal })));
  const t0 = Date.now();
  proc.kill('SIGTERM');
  const { code } = await exited;
  assert.ok(Date.now() - t0 < 2000, `exit took ${Date.now() - t0} ms`);
  assert.equal(code, 0);
  try { while (!(await it.next()).done); } catch { /* the stream may end with the connection */ }
});

test('a non-loopback address without --api-key prints a warning', async () => {
  const proc = spawn(snapkv, ['serve', '--model', model, '--port', '0', '--host', '0.0.0.0'],
                     { stdio: ['ignore', 'ignore', 'pipe'] });
  servers.push(proc);
  let log = '';
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('no listening line: ' + log)), 30000);
    proc.stderr.on('data', (d) => {
      log += d;
      if (/listening on/.test(log)) { clearTimeout(timer); resolve(); }
    });
  });
  assert.match(log, /warning: listening on 0\.0\.0\.0 without --api-key/);
});
