// openai_client.test.mjs — `nextn serve` through the official `openai` npm
// client (pinned in package.json) and raw HTTP: chat, streaming, usage, stop
// strings, every stop id, tools, seeds (unseeded requests draw apart, and
// their drafts are sampled), logprobs and echo, /tokenize, 8 concurrent
// streams equal to the same requests alone,
// cancellation, malformed requests, the prefix cache (multi-turn hits, the
// disk tier across a restart, damaged files), a bounded load test and a
// graceful shutdown. Loopback only.
//
//   node openai_client.test.mjs NEXTN_BINARY MODEL_DIR WORK_DIR
//
// Prints one line per test and the figures it measured (TTFT by turn, RSS);
// exits 1 if any test failed.
import { spawn, spawnSync } from 'node:child_process';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';

let OpenAI;
try {
  ({ default: OpenAI } = await import('openai'));
} catch (e) {
  console.error(`the openai package is missing: run \`npm ci --prefix tests/server\` (scripts/test.sh does) (${e.message})`);
  process.exit(1);
}

const [nextn, modelDir, workDir] = process.argv.slice(2);
if (!nextn || !modelDir || !workDir) {
  console.error('usage: node openai_client.test.mjs NEXTN_BINARY MODEL_DIR WORK_DIR');
  process.exit(2);
}
fs.rmSync(workDir, { recursive: true, force: true });
fs.mkdirSync(workDir, { recursive: true });
const cacheDir = path.join(workDir, 'cache');
const KEY = 'sk-nextn-test';
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// ---- the server process --------------------------------------------------

let server = null; // { proc, port, base, exited }

async function startServer(extra = [], dir = modelDir) {
  const portFile = path.join(workDir, 'port');
  fs.rmSync(portFile, { force: true });
  const args = ['serve', '-m', dir, '-t', '2', '--port', '0', '--port-file', portFile, '--parallel', '4',
    '--ctx', '1024', '--prefill-chunk', '64', '--cache-ram', '64', '--cache-dir', cacheDir, '--api-key', KEY,
    '--max-body', '65536', ...extra];
  // a small ASan quarantine, so freed memory shows as freed in the RSS check
  const env = { ...process.env, ASAN_OPTIONS: `${process.env.ASAN_OPTIONS || ''}:quarantine_size_mb=4` };
  const proc = spawn(nextn, args, { stdio: ['ignore', 'inherit', 'pipe'], env });
  const s = { proc, log: '', exited: null };
  proc.stderr.on('data', (d) => { s.log += d; });
  proc.on('exit', (code, sig) => { s.exited = { code, sig }; });
  for (let i = 0; i < 1200 && !s.exited; i++) {
    if (fs.existsSync(portFile) && fs.readFileSync(portFile, 'utf8').trim()) break;
    await sleep(50);
  }
  if (s.exited) throw new Error(`server exited at start: ${JSON.stringify(s.exited)}\n${s.log}`);
  s.port = Number(fs.readFileSync(portFile, 'utf8').trim());
  s.base = `http://127.0.0.1:${s.port}`;
  server = s;
  return s;
}

async function stopServer(signal = 'SIGTERM') {
  const s = server;
  server = null;
  if (!s || s.exited) return s?.exited;
  s.proc.kill(signal);
  for (let i = 0; i < 600 && !s.exited; i++) await sleep(50);
  return s.exited;
}

const client = () => new OpenAI({ baseURL: `${server.base}/v1`, apiKey: KEY, maxRetries: 0, timeout: 120000 });

async function raw(method, url, body, headers = {}) {
  const h = { Authorization: `Bearer ${KEY}`, 'Content-Type': 'application/json', ...headers };
  const r = await fetch(`${server.base}${url}`, { method, headers: h, body });
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* metrics, or not JSON */ }
  return { status: r.status, text, json, headers: r.headers };
}

// POSTs body pieces with Transfer-Encoding: chunked (fetch sends a string with
// a Content-Length); resolves to the response's head and body text.
function chunked(url, pieces) {
  return new Promise((resolve, reject) => {
    let data = '';
    const sock = net.connect({ port: server.port, host: '127.0.0.1' }, () => {
      sock.write(`POST ${url} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${KEY}\r\nContent-Type: application/json\r\n` +
        'Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n');
      for (const p of pieces) sock.write(`${Buffer.byteLength(p).toString(16)}\r\n${p}\r\n`);
      sock.end('0\r\n\r\n');
    });
    sock.on('data', (d) => { data += d; });
    sock.on('error', (e) => (data ? null : reject(e))); // a reset after the answer still leaves the answer
    sock.on('close', () => {
      const at = data.indexOf('\r\n\r\n');
      resolve({ head: data.slice(0, at), body: data.slice(at + 4) });
    });
  });
}

async function metrics() {
  const r = await raw('GET', '/metrics');
  const m = {};
  for (const line of r.text.split('\n')) {
    const at = line.lastIndexOf(' ');
    if (!line || line.startsWith('#') || at < 0) continue;
    m[line.slice(0, at)] = Number(line.slice(at + 1));
  }
  return m;
}

function rssKB(pid) {
  const s = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
  return Number(/VmRSS:\s+(\d+)/.exec(s)[1]);
}

// ---- helpers ------------------------------------------------------------------

const user = (content) => ({ role: 'user', content });

async function chatWhole(messages, extra = {}, signal) {
  return client().chat.completions.create({ model: 'default', messages, max_tokens: 24, temperature: 0, ...extra }, { signal });
}

// Streams a chat completion; returns { reasoning, content, chunks, finish, usage, ttft }.
async function chatStream(messages, extra = {}, signal) {
  const t0 = performance.now();
  const stream = await client().chat.completions.create(
    { model: 'default', messages, max_tokens: 24, temperature: 0, stream: true, ...extra }, { signal });
  const out = { reasoning: '', content: '', chunks: [], finish: null, usage: null, ttft: null, calls: [] };
  for await (const chunk of stream) {
    out.chunks.push(chunk);
    if (chunk.usage) out.usage = chunk.usage;
    const c = chunk.choices[0];
    if (!c) continue;
    const d = c.delta || {};
    if ((d.content || d.reasoning_content) && out.ttft === null) out.ttft = performance.now() - t0;
    out.reasoning += d.reasoning_content || '';
    out.content += d.content || '';
    if (d.tool_calls) out.calls.push(...d.tool_calls);
    if (c.finish_reason) out.finish = c.finish_reason;
  }
  return out;
}

const tests = [];
const test = (name, fn) => tests.push({ name, fn });

// ---- tests ---------------------------------------------------------------------

test('lists the model and reports health', async () => {
  const models = await client().models.list();
  assert.equal(models.data.length, 1);
  assert.equal(models.data[0].object, 'model');
  const one = await client().models.retrieve(models.data[0].id);
  assert.equal(one.id, models.data[0].id);
  assert.equal(one.object, 'model');
  const missing = await client().models.retrieve('no-such-model').then(() => null, (e) => e);
  assert.ok(missing && missing.status === 404 && missing.code === 'model_not_found' && missing.param === 'model', `got ${missing}`);
  const odd = await raw('GET', '/v1/models/%ff%01x');
  assert.equal(odd.status, 404);
  assert.match(odd.json.error.message, /The model '\?\?x' does not exist/);
  assert.equal((await raw('POST', `/v1/models/${models.data[0].id}`, '{}')).status, 405);
  const h = await raw('GET', '/health', undefined, { Authorization: '' });
  assert.equal(h.status, 200);
  assert.equal(h.json.status, 'ok');
  // load balancers and uptime checks probe with HEAD: a 405 would mark the server down
  for (const url of ['/health', '/v1/models', `/v1/models/${models.data[0].id}`, '/metrics']) {
    const head = await raw('HEAD', url);
    assert.equal(head.status, 200, `HEAD ${url}`);
    assert.equal(head.text, '', `HEAD ${url} has no body`);
  }
});

test('answers a chat completion with usage', async () => {
  const r = await chatWhole([user('Who was Moses?')]);
  assert.equal(r.object, 'chat.completion');
  assert.match(r.id, /^chatcmpl-/);
  const m = r.choices[0].message;
  assert.equal(m.role, 'assistant');
  assert.ok((m.content || '').length + (m.reasoning_content || '').length > 0, 'no text at all');
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(r.usage.completion_tokens, 24);
  assert.ok(r.usage.prompt_tokens > 5);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
});

test('streams the same text the whole response has', async () => {
  const msgs = [user('Tell me of Abraham.')];
  for (const thinking of [true, false]) {
    const kw = { chat_template_kwargs: { enable_thinking: thinking } };
    const whole = await chatWhole(msgs, kw);
    const s = await chatStream(msgs, { ...kw, stream_options: { include_usage: true } });
    assert.equal(s.chunks[0].choices[0].delta.role, 'assistant');
    assert.equal(s.content, whole.choices[0].message.content || '');
    assert.equal(s.reasoning, whole.choices[0].message.reasoning_content || '');
    assert.equal(s.finish, whole.choices[0].finish_reason);
    // the same prompt again: its conversation part now comes from the prefix cache
    assert.deepEqual({ ...s.usage, prompt_tokens_details: null }, { ...whole.usage, prompt_tokens_details: null });
    const cached = s.usage.prompt_tokens_details.cached_tokens;
    assert.ok(cached > 0 && cached >= whole.usage.prompt_tokens_details.cached_tokens && cached < s.usage.prompt_tokens, `cached ${cached}`);
    assert.equal(s.chunks.at(-1).choices.length, 0, 'the usage chunk has no choices');
    if (!thinking) assert.equal(s.reasoning, '', 'enable_thinking false: no reasoning');
    // the prompt opens the think block: what follows is reasoning (24 tokens
    // of this model at temperature 0 never close it), not the answer
    else assert.deepEqual([s.reasoning.length > 0, s.content], [true, ''], 'enable_thinking true: the reasoning is reasoning_content');
  }
});

test('text completions stream and stop at stop strings', async () => {
  const c = client();
  const base = await c.completions.create({ model: 'default', prompt: 'And God said unto Moses,', max_tokens: 40, temperature: 0 });
  const text = base.choices[0].text;
  assert.equal(base.object, 'text_completion');
  const words = text.split(' ').filter((w) => w.length > 2);
  const stopWord = words[Math.min(4, words.length - 1)];
  const want = text.slice(0, text.indexOf(stopWord));
  const stopped = await c.completions.create({ model: 'default', prompt: 'And God said unto Moses,', max_tokens: 40, temperature: 0,
    stop: ['@@never@@', stopWord] });
  assert.equal(stopped.choices[0].text, want);
  assert.equal(stopped.choices[0].finish_reason, 'stop');
  const stream = await c.completions.create({ model: 'default', prompt: 'And God said unto Moses,', max_tokens: 40, temperature: 0,
    stop: stopWord, stream: true });
  let streamed = '';
  let finish = null;
  for await (const ch of stream) {
    streamed += ch.choices[0]?.text || '';
    finish = ch.choices[0]?.finish_reason || finish;
  }
  assert.equal(streamed, want);
  assert.equal(finish, 'stop');
});

test('takes tools and tool results through a round trip', async () => {
  const tools = [{ type: 'function', function: { name: 'find_verse', description: 'Look up a Bible verse',
    parameters: { type: 'object', properties: { book: { type: 'string' }, chapter: { type: 'integer' } }, required: ['book'] } } }];
  const first = await chatWhole([user('Find Genesis 1.')], { tools, tool_choice: 'auto' });
  const m = first.choices[0].message;
  assert.ok(['stop', 'length', 'tool_calls'].includes(first.choices[0].finish_reason));
  if (m.tool_calls) for (const tc of m.tool_calls) JSON.parse(tc.function.arguments); // valid JSON when present
  // the client sends the call and its result back: the template renders both
  const call = { id: 'call_1', type: 'function', function: { name: 'find_verse', arguments: '{"book":"Genesis","chapter":1}' } };
  const withResult = [user('Find Genesis 1.'), { role: 'assistant', content: null, tool_calls: [call] },
    { role: 'tool', tool_call_id: 'call_1', content: 'In the beginning God created the heaven and the earth.' }];
  const second = await chatWhole(withResult, { tools });
  assert.equal(second.object, 'chat.completion');
  assert.ok(second.usage.prompt_tokens > first.usage.prompt_tokens + 10, 'the tool call and result reached the prompt');
  const none = await chatWhole([user('Find Genesis 1.')], { tools, tool_choice: 'none' });
  assert.ok(none.usage.prompt_tokens < first.usage.prompt_tokens, 'tool_choice none leaves the tools out');
});

test('a seed makes sampling repeatable', async () => {
  const msgs = [user('Sing of the sea.')];
  const a = await chatWhole(msgs, { temperature: 0.9, top_p: 0.95, seed: 42, max_tokens: 32 });
  const b = await chatWhole(msgs, { temperature: 0.9, top_p: 0.95, seed: 42, max_tokens: 32 });
  assert.deepEqual(a.choices[0].message, b.choices[0].message);
  let differs = false;
  for (const seed of [43, 44, 45]) {
    const c = await chatWhole(msgs, { temperature: 0.9, top_p: 0.95, seed, max_tokens: 32 });
    differs ||= JSON.stringify(c.choices[0].message) !== JSON.stringify(a.choices[0].message);
  }
  assert.ok(differs, 'three other seeds all gave the same text');
});

// Without a seed nothing is to be repeated: the server runs rejection sampling
// with drafts drawn from the head's distribution, which accepts far more drafts
// than matching the head's argmax, as seeded requests do (the bundled model at
// temperature 1: ~0.7 against ~0.2).
test('a sampled request without a seed drafts from the head\'s distribution', async () => {
  const ask = (extra) => client().completions.create({ model: 'default', prompt: 'And God said unto Moses,', max_tokens: 96,
    temperature: 1, ...extra });
  const rate = (a, b) => {
    const drafted = b.nextn_mtp_drafted_total - a.nextn_mtp_drafted_total;
    return { drafted, rate: drafted ? (b.nextn_mtp_accepted_total - a.nextn_mtp_accepted_total) / drafted : 0 };
  };
  const m0 = await metrics();
  for (let i = 0; i < 8; i++) await ask({});
  const m1 = await metrics();
  for (let seed = 1; seed <= 8; seed++) await ask({ seed });
  const m2 = await metrics();
  const seedless = rate(m0, m1), seeded = rate(m1, m2);
  console.log(`    acceptance at temperature 1: ${seedless.rate.toFixed(2)} of ${seedless.drafted} drafts without a seed, `
    + `${seeded.rate.toFixed(2)} of ${seeded.drafted} with one`);
  assert.ok(seedless.drafted >= 40, `only ${seedless.drafted} drafts`);
  assert.ok(seedless.rate > 0.4 && seedless.rate > seeded.rate + 0.2, JSON.stringify({ seedless, seeded }));
});

// Requests without a seed are independent draws: two users asking the same
// thing at temperature 1 need not get the same text. The first token is the
// prefill's sample, which no draft touches: 8 of them all equal by chance has
// probability below p^7 for the likeliest token's p, checked to be tiny.
test('requests without a seed draw different samples', async () => {
  const c = client();
  const prompt = 'And God said unto Moses,';
  const top = await c.completions.create({ model: 'default', prompt, max_tokens: 1, temperature: 0, logprobs: 1 });
  const p = Math.exp(top.choices[0].logprobs.token_logprobs[0]);
  assert.ok(p ** 7 < 1e-6, `the likeliest first token has p ${p}: pick a prompt with more choice`);
  const firsts = new Set();
  for (let i = 0; i < 8; i++) firsts.add((await c.completions.create({ model: 'default', prompt, max_tokens: 1, temperature: 1 })).choices[0].text);
  assert.ok(firsts.size > 1, `8 unseeded samples all began ${JSON.stringify([...firsts])}`);
});

test('a prompt of token ids reads as its text does', async () => {
  const c = client();
  const ids = JSON.parse(spawnSync(nextn, ['tokenize', '-m', modelDir, '--text', 'And God said unto Moses,']).stdout);
  const ask = (prompt) => c.completions.create({ model: 'default', prompt, max_tokens: 16, temperature: 0 });
  const text = await ask('And God said unto Moses,');
  assert.equal((await ask(ids)).choices[0].text, text.choices[0].text);
  const batchOfOne = await ask([ids]);
  assert.equal(batchOfOne.choices[0].text, text.choices[0].text);
  assert.equal(batchOfOne.usage.prompt_tokens, ids.length);
  const far = await raw('POST', '/v1/completions', JSON.stringify({ prompt: [1, 99999999] }));
  assert.equal(far.status, 400);
  assert.equal(far.json.error.param, 'prompt');
  assert.match(far.json.error.message, /outside the vocabulary/);
});

test('prompt and completion fit the context, to the last token', async () => {
  // --ctx 1024: a prompt of 1023 ids gets its one token; 1020 with max_tokens 4
  // gets all 4; one more than fits is a 400 that counts what was asked
  // (the bundled model's eos ids banned, so that the output runs to the limit)
  const ids = (n) => Array.from({ length: n }, (_, i) => 100 + (i % 50));
  const noEos = { 4320: -100, 4322: -100 };
  const ask = (n, extra) => raw('POST', '/v1/completions', JSON.stringify({ prompt: ids(n), temperature: 0, ...extra }));
  const last = await ask(1023, { logit_bias: noEos });
  assert.equal(last.status, 200, last.text);
  assert.deepEqual([last.json.usage.prompt_tokens, last.json.usage.completion_tokens], [1023, 1]);
  assert.equal(last.json.choices[0].finish_reason, 'length');
  const four = await ask(1020, { max_tokens: 4, logit_bias: noEos });
  assert.equal(four.status, 200, four.text);
  assert.deepEqual([four.json.usage.prompt_tokens, four.json.usage.completion_tokens], [1020, 4]);
  const over = await ask(1021, { max_tokens: 4 });
  assert.equal(over.status, 400);
  assert.equal(over.json.error.param, 'prompt');
  assert.match(over.json.error.message, /maximum context length is 1024 tokens\. However, you requested 1025 tokens \(1021 in the prompt, 4 in the completion\)/);
  const full = await ask(1024, {});
  assert.equal(full.status, 400);
  assert.match(full.json.error.message, /requested 1025 tokens \(1024 in the prompt, 1 in the completion\)/);
  const zero = await ask(8, { max_completion_tokens: 0 });
  assert.equal(zero.status, 400);
  assert.equal(zero.json.error.param, 'max_completion_tokens');
});

test('logit_bias forces or bans a token', async () => {
  const c = client();
  const [id] = JSON.parse(spawnSync(nextn, ['tokenize', '-m', modelDir, '--text', ' Moses']).stdout);
  const piece = spawnSync(nextn, ['detokenize', '-m', modelDir, '--ids', String(id)]).stdout.toString();
  const ask = (extra) => c.completions.create({ model: 'default', prompt: 'And God said', max_tokens: 3, temperature: 0, ...extra });
  const forced = await ask({ logit_bias: { [id]: 100 } });
  assert.equal(forced.choices[0].text, piece.repeat(3));
  const sampled = await ask({ logit_bias: { [id]: 100 }, temperature: 1, seed: 3 });
  assert.equal(sampled.choices[0].text, piece.repeat(3));
  const base = await ask({ max_tokens: 8 });
  const [first] = JSON.parse(spawnSync(nextn, ['tokenize', '-m', modelDir, '--text', base.choices[0].text]).stdout);
  const banned = await ask({ max_tokens: 8, logit_bias: { [first]: -100 } });
  assert.notEqual(banned.choices[0].text, base.choices[0].text);
  const far = await raw('POST', '/v1/completions', JSON.stringify({ prompt: 'x', logit_bias: { 99999999: 1 } }));
  assert.equal(far.status, 400);
  assert.equal(far.json.error.param, 'logit_bias');
  assert.match(far.json.error.message, /outside the vocabulary/);
});

// Each of the tokenizer's stop ids ends the output, not only the first: a
// checkpoint without generation_config.json whose config names <|im_end|>
// alone as eos still stops at <|endoftext|> (forced with logit_bias), as the
// bundled checkpoint, which lists both, does.
test('every stop id of the tokenizer ends the output', async () => {
  const idOf = (text) => JSON.parse(spawnSync(nextn, ['tokenize', '-m', modelDir, '--text', text]).stdout);
  const stops = [...idOf('<|im_end|>'), ...idOf('<|endoftext|>')];
  assert.equal(stops.length, 2);
  const variant = path.join(workDir, 'im-end-only');
  fs.mkdirSync(variant, { recursive: true });
  const cfg = JSON.parse(fs.readFileSync(path.join(modelDir, 'config.json'), 'utf8'));
  delete cfg.eos_token_id;
  (cfg.text_config || cfg).eos_token_id = stops[0];
  fs.writeFileSync(path.join(variant, 'config.json'), JSON.stringify(cfg));
  for (const f of ['model.safetensors', 'tokenizer.json', 'tokenizer_config.json'])
    fs.symlinkSync(path.resolve(modelDir, f), path.join(variant, f));
  const check = async (which) => {
    for (const id of stops) {
      const r = await client().completions.create({ model: 'default', prompt: 'And God said', max_tokens: 5, temperature: 0,
        logit_bias: { [id]: 100 } });
      assert.deepEqual([r.choices[0].finish_reason, r.usage.completion_tokens, r.choices[0].text], ['stop', 0, ''], `${which}: stop id ${id}`);
    }
  };
  await check('the bundled checkpoint');
  await stopServer();
  // its own cache directory: the other tests count the bundled model's files
  await startServer(['--cache-dir', path.join(workDir, 'cache-im-end-only')], variant);
  try {
    await check('config eos <|im_end|> only');
  } finally {
    await stopServer(); // the next test starts the bundled model's server again
  }
});

test('logprobs come with every token, whole and streamed', async () => {
  const c = client();
  const prompt = 'And God said unto Moses,';
  // completions: the tokens spell the text, offsets count its characters
  const whole = await c.completions.create({ model: 'default', prompt, max_tokens: 12, temperature: 0, logprobs: 3 });
  const ch = whole.choices[0], lp = ch.logprobs;
  assert.equal(lp.tokens.length, whole.usage.completion_tokens);
  assert.equal(lp.tokens.join(''), ch.text);
  let at = 0;
  lp.tokens.forEach((t, i) => {
    assert.equal(lp.text_offset[i], at, `offset of token ${i}`);
    at += [...t].length;
    const top = Object.entries(lp.top_logprobs[i]);
    assert.ok(top.length >= 3 && top.length <= 4, `${top.length} alternatives`);
    assert.ok(lp.token_logprobs[i] <= 0);
    // greedy without penalties: the chosen token is the likeliest
    const best = Math.max(...top.map(([, v]) => v));
    assert.equal(lp.token_logprobs[i], best, `token ${i} is not the likeliest`);
    assert.ok(top.reduce((a, [, v]) => a + Math.exp(v), 0) <= 1 + 1e-5, 'probabilities above 1');
  });
  let streamed = [];
  const stream = await c.completions.create({ model: 'default', prompt, max_tokens: 12, temperature: 0, logprobs: 3, stream: true });
  for await (const k of stream) if (k.choices[0]?.logprobs) streamed.push(...k.choices[0].logprobs.token_logprobs);
  assert.deepEqual(streamed, lp.token_logprobs, 'the stream carries the same entries');
  // chat: content entries with bytes and top_logprobs; a stream carries the same
  const msgs = [user('Who was Moses?')];
  const kw = { logprobs: true, top_logprobs: 2, max_tokens: 16, chat_template_kwargs: { enable_thinking: false } };
  const r = await chatWhole(msgs, kw);
  const content = r.choices[0].logprobs.content;
  assert.equal(content.length, r.usage.completion_tokens);
  assert.equal(r.choices[0].logprobs.refusal, null);
  for (const e of content) {
    assert.equal(Buffer.from(e.bytes).toString('utf8'), e.token);
    assert.equal(e.top_logprobs.length, 2);
    assert.equal(e.top_logprobs[0].token, e.token);
    assert.equal(e.top_logprobs[0].logprob, e.logprob);
    assert.ok(e.top_logprobs[1].logprob <= e.logprob);
  }
  const s = await chatStream(msgs, kw);
  const entries = s.chunks.flatMap((k) => k.choices[0]?.logprobs?.content || []);
  assert.deepEqual(entries, content);
  // sampled: the chosen token need not be the likeliest, the entries still match the text
  const hot = await c.completions.create({ model: 'default', prompt, max_tokens: 12, temperature: 1.2, seed: 9, logprobs: 0 });
  assert.equal(hot.choices[0].logprobs.tokens.join(''), hot.choices[0].text);
  assert.ok(hot.choices[0].logprobs.top_logprobs.every((t) => Object.keys(t).length === 1), 'logprobs 0: the chosen token only');
  // without logprobs: null
  assert.equal((await chatWhole(msgs, { max_tokens: 2 })).choices[0].logprobs, null);
});

test('echo scores a prompt as generation scored its tokens', async () => {
  const c = client();
  const prompt = 'And God said unto Moses,';
  const ids = JSON.parse(spawnSync(nextn, ['tokenize', '-m', modelDir, '--text', prompt]).stdout);
  // scoring only: the prompt's text, an entry a token, the first null
  const s = await c.completions.create({ model: 'default', prompt, max_tokens: 0, echo: true, logprobs: 2, temperature: 0 });
  const lp = s.choices[0].logprobs;
  assert.equal(s.choices[0].text, prompt);
  assert.equal(s.usage.completion_tokens, 0);
  assert.equal(s.choices[0].finish_reason, 'length');
  assert.equal(lp.tokens.length, ids.length);
  assert.equal(lp.tokens.join(''), prompt);
  assert.equal(lp.token_logprobs[0], null);
  assert.equal(lp.top_logprobs[0], null);
  assert.ok(lp.token_logprobs.slice(1).every((x) => x <= 0), 'a logprob above 0');
  // generate, then score prompt + output: the output's entries come back the same
  const gen = await c.completions.create({ model: 'default', prompt, max_tokens: 8, temperature: 0, logprobs: 2 });
  const gl = gen.choices[0].logprobs;
  const full = JSON.parse(spawnSync(nextn, ['tokenize', '-m', modelDir, '--text', prompt + gen.choices[0].text]).stdout);
  const both = await c.completions.create({ model: 'default', prompt: full, max_tokens: 0, echo: true, logprobs: 2 });
  const bl = both.choices[0].logprobs;
  assert.deepEqual(bl.tokens, [...lp.tokens, ...gl.tokens], 'prompt + output tokenize as they were generated');
  for (let i = 0; i < gl.tokens.length; i++) {
    const j = ids.length + i;
    assert.ok(Math.abs(bl.token_logprobs[j] - gl.token_logprobs[i]) < 1e-5, `token ${i}: ${bl.token_logprobs[j]} vs ${gl.token_logprobs[i]}`);
  }
  assert.ok(Math.abs(bl.token_logprobs[ids.length - 1] - lp.token_logprobs[ids.length - 1]) < 1e-5);
  // echo with output, streamed: the prompt's chunk first, then the output; offsets run on
  const stream = await c.completions.create({ model: 'default', prompt, max_tokens: 8, temperature: 0, logprobs: 1, echo: true, stream: true });
  let text = '';
  const offs = [];
  for await (const k of stream) {
    text += k.choices[0]?.text || '';
    offs.push(...(k.choices[0]?.logprobs?.text_offset || []));
  }
  assert.equal(text, prompt + gen.choices[0].text);
  assert.deepEqual(offs, [...lp.text_offset, ...gl.text_offset.map((o) => o + prompt.length)]);
  // echo without logprobs: the text only; max_tokens 0 without echo is still refused
  const plain = await c.completions.create({ model: 'default', prompt, max_tokens: 8, temperature: 0, echo: true });
  assert.equal(plain.choices[0].text, prompt + gen.choices[0].text);
  assert.equal(plain.choices[0].logprobs, null);
  const zero = await raw('POST', '/v1/completions', JSON.stringify({ prompt, max_tokens: 0 }));
  assert.equal(zero.status, 400);
  assert.equal(zero.json.error.param, 'max_tokens');
});

test('/tokenize counts what a completion will, /detokenize reads ids back', async () => {
  const post = (url, body) => raw('POST', url, JSON.stringify(body));
  const prompt = 'And God said unto Moses,';
  const ids = JSON.parse(spawnSync(nextn, ['tokenize', '-m', modelDir, '--text', prompt]).stdout);
  const t = await post('/tokenize', { prompt, return_token_strs: true });
  assert.equal(t.status, 200, t.text);
  assert.deepEqual(t.json.tokens, ids);
  assert.equal(t.json.count, ids.length);
  assert.equal(t.json.max_model_len, 1024);
  assert.equal(t.json.token_strs.join(''), prompt);
  const msgs = [user('Who was Moses?')];
  const chatCount = await post('/tokenize', { messages: msgs });
  const answered = await chatWhole(msgs, { max_tokens: 1 });
  assert.equal(chatCount.json.count, answered.usage.prompt_tokens, 'the count a chat completion reports');
  assert.equal(chatCount.json.token_strs, undefined);
  const d = await post('/detokenize', { tokens: ids });
  assert.equal(d.status, 200);
  assert.equal(d.json.prompt, prompt);
  const cases = [
    ['/detokenize', { tokens: [1, 99999999] }, /tokens\[1\] is not a token id/, 'tokens'],
    ['/detokenize', { tokens: 'x' }, /array of token ids/, 'tokens'],
    ['/tokenize', {}, /prompt/, 'prompt'],
    ['/tokenize', { messages: [] }, /messages/, 'messages'],
    ['/tokenize', { prompt, return_token_strs: 'yes' }, /boolean/, 'return_token_strs'],
  ];
  for (const [url, body, re, param] of cases) {
    const r = await post(url, body);
    assert.equal(r.status, 400, `${url} ${JSON.stringify(body)} -> ${r.status}`);
    assert.match(r.json.error.message, re);
    assert.equal(r.json.error.param, param);
  }
  // a client fixing a hand-written body needs to know where the JSON broke, as the completion endpoints say
  for (const url of ['/tokenize', '/detokenize']) {
    const broken = await raw('POST', url, '{"prompt": "x",\n "tokens": [1,}');
    assert.equal(broken.status, 400);
    assert.match(broken.json.error.message, /^invalid JSON at line 2 column \d+/, `${url}: ${broken.text}`);
    assert.match((await raw('POST', url, '[1]')).json.error.message, /must be a JSON object/);
  }
  assert.equal((await raw('GET', '/tokenize')).status, 405);
  assert.equal((await raw('POST', '/tokenize', '{"prompt":"x"}', { Authorization: 'Bearer wrong' })).status, 401);
});

test('8 concurrent streams equal the same requests alone', async () => {
  const prompts = ['Who was Noah?', 'Tell me of Jacob.', 'What is the law?', 'Sing a psalm.', 'Who was David?',
    'Where is Egypt?', 'What did Moses say?', 'Who built the ark?'];
  const opts = { max_tokens: 40, chat_template_kwargs: { enable_thinking: false } };
  const alone = [];
  for (const p of prompts) alone.push(await chatStream([user(p)], opts));
  const before = await metrics();
  const together = await Promise.all(prompts.map((p) => chatStream([user(p)], opts)));
  const after = await metrics();
  together.forEach((t, i) => {
    assert.equal(t.content, alone[i].content, `request ${i} differs in company`);
    assert.equal(t.reasoning, alone[i].reasoning);
    assert.equal(t.finish, alone[i].finish);
  });
  const rows = after.nextn_batch_size_mean; // mean rows per decode round since start
  assert.ok(rows > before.nextn_batch_size_mean, `rows never decoded together (mean ${rows})`);
});

test('a cancelled stream frees its row and the server goes on', async () => {
  const before = await metrics();
  const ac = new AbortController();
  let got = 0;
  try {
    const stream = await client().chat.completions.create({ model: 'default', messages: [user('Recite the begats.')],
      max_tokens: 900, temperature: 0, stream: true }, { signal: ac.signal });
    for await (const ch of stream) {
      if (ch.choices[0]?.delta?.content || ch.choices[0]?.delta?.reasoning_content) got++;
      if (got === 3) {
        ac.abort();
        break;
      }
    }
  } catch (e) {
    assert.ok(e.name === 'AbortError' || /abort/i.test(String(e)), String(e));
  }
  assert.equal(got, 3);
  let m;
  for (let i = 0; i < 200; i++) {
    m = await metrics();
    if (m.nextn_requests_cancelled_total > before.nextn_requests_cancelled_total && m.nextn_batch_size === 0) break;
    await sleep(50);
  }
  assert.equal(m.nextn_requests_cancelled_total, before.nextn_requests_cancelled_total + 1);
  assert.equal(m.nextn_batch_size, 0);
  assert.ok(m.nextn_generated_tokens_total - before.nextn_generated_tokens_total < 900, 'the row ran on');
  const r = await chatWhole([user('Still there?')]);
  assert.equal(r.usage.completion_tokens, 24);
  // a whole (non-stream) request whose client goes away is cancelled too:
  // gone as soon as its row runs (900 tokens take 0.3 s in a release build
  // on a 2-core VM; a fixed wait of 150 ms once let it finish first)
  const ac2 = new AbortController();
  const gone = chatWhole([user('Recite the law of Moses.')], { max_tokens: 900 }, ac2.signal).catch((e) => e);
  for (let i = 0; i < 1000 && (await metrics()).nextn_batch_size === 0; i++) await sleep(2);
  ac2.abort();
  assert.match(String(await gone), /abort/i);
  for (let i = 0; i < 200; i++) {
    m = await metrics();
    if (m.nextn_requests_cancelled_total === before.nextn_requests_cancelled_total + 2 && m.nextn_batch_size === 0) break;
    await sleep(50);
  }
  assert.equal(m.nextn_requests_cancelled_total, before.nextn_requests_cancelled_total + 2, 'the whole request ran on');
  assert.equal(m.nextn_batch_size, 0);
});

// One HTTP/1.1 exchange on a raw socket that shuts its sending side (a FIN)
// once the request is written, as socat and `nc -N` do. onData(socket, bytes so far) may destroy the socket.
// Returns { status, body } (de-chunked), or { closed } if the socket was
// destroyed.
function halfClosed(url, body, { onData = () => {} } = {}) {
  return new Promise((resolve, reject) => {
    const sock = net.connect({ port: server.port, host: '127.0.0.1', allowHalfOpen: true });
    let buf = Buffer.alloc(0);
    sock.on('connect', () => {
      sock.write(`POST ${url} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${KEY}\r\n` +
        `Content-Type: application/json\r\nConnection: close\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
      sock.end();
    });
    sock.on('data', (d) => { buf = Buffer.concat([buf, d]); onData(sock, buf); });
    sock.on('error', reject);
    sock.on('close', () => {
      if (sock.destroyed && !sock.readableEnded) return resolve({ closed: true });
      const text = buf.toString('latin1'), at = text.indexOf('\r\n\r\n');
      const head = text.slice(0, at);
      let rest = text.slice(at + 4), out = '';
      if (/transfer-encoding: chunked/i.test(head)) {
        for (;;) {
          const eol = rest.indexOf('\r\n'), n = parseInt(rest.slice(0, eol), 16);
          if (!n) break;
          out += rest.slice(eol + 2, eol + 2 + n);
          rest = rest.slice(eol + 4 + n);
        }
      } else out = rest;
      resolve({ status: Number(head.split(' ')[1]), body: Buffer.from(out, 'latin1').toString('utf8') });
    });
  });
}

async function waitIdle(before, cancelled) {
  let m;
  for (let i = 0; i < 200; i++) {
    m = await metrics();
    if (m.nextn_requests_cancelled_total === before.nextn_requests_cancelled_total + cancelled && m.nextn_batch_size === 0) break;
    await sleep(50);
  }
  return m;
}

// HTTP/1.1 lets a client shut its sending side once the request is out. A
// stream writes as it goes, so it runs to the end for such a client; a
// whole request cannot tell it from a client that went away, so it is
// cancelled (no row busy for nobody) and answered with an error that says
// so -- never a cut answer passed off as finish_reason "length".
test('a client that half-closes gets its whole stream, or an error for a whole request', async () => {
  // no stop id: the whole request must still be running when the server sees the FIN
  const idOf = (text) => JSON.parse(spawnSync(nextn, ['tokenize', '-m', modelDir, '--text', text]).stdout);
  const logit_bias = Object.fromEntries([...idOf('<|im_end|>'), ...idOf('<|endoftext|>')].map((id) => [id, -100]));
  const req = { prompt: 'And God said', max_tokens: 300, temperature: 0, logit_bias, stream_options: { include_usage: true } };
  const full = await client().completions.create({ model: 'default', ...req });
  let before = await metrics();
  const s = await halfClosed('/v1/completions', JSON.stringify({ ...req, stream: true }));
  assert.equal(s.status, 200);
  const events = s.body.split('\n\n').filter((e) => e.startsWith('data: ')).map((e) => e.slice(6));
  assert.equal(events.at(-1), '[DONE]');
  const chunks = events.slice(0, -1).map((e) => JSON.parse(e));
  assert.equal(chunks.map((c) => c.choices[0]?.text || '').join(''), full.choices[0].text, 'the stream was cut');
  assert.equal(chunks.at(-2).choices[0].finish_reason, 'length');
  assert.equal(chunks.at(-1).usage.completion_tokens, 300);
  let m = await waitIdle(before, 0);
  assert.equal(m.nextn_requests_cancelled_total, before.nextn_requests_cancelled_total);
  // a whole request: cancelled, and the error names what happened
  before = m;
  // (libmicrohttpd 0.9.75 may read the FIN itself when it resumes the parked
  // connection, and drop it unanswered as it does for a client that went
  // away: no answer at all is still no cut answer)
  const w = await halfClosed('/v1/completions', JSON.stringify({ ...req, max_tokens: 1000 }));
  assert.notEqual(w.status, 200, 'a cut answer passed off as whole');
  if (w.status || w.body) {
    assert.equal(w.status, 400, JSON.stringify(w));
    const err = JSON.parse(w.body).error;
    assert.match(err.message, /^the client closed its side of the connection; the request was cancelled after \d+ tokens/);
    assert.equal(err.type, 'invalid_request_error');
  }
  m = await waitIdle(before, 1);
  assert.equal(m.nextn_requests_cancelled_total, before.nextn_requests_cancelled_total + 1, 'the whole request ran on');
  assert.equal(m.nextn_batch_size, 0);
  // a stream whose client then goes away for good: the next write fails, and
  // that ends the response, cancels the request and frees its row
  before = m;
  const logAt = server.log.length;
  const gone = await halfClosed('/v1/completions', JSON.stringify({ ...req, max_tokens: 900, stream: true }),
    { onData: (sock, bytes) => { if (bytes.includes('"text"')) sock.destroy(); } });
  assert.ok(gone.closed);
  m = await waitIdle(before, 1);
  assert.equal(m.nextn_requests_cancelled_total, before.nextn_requests_cancelled_total + 1, 'the stream ran on');
  assert.equal(m.nextn_batch_size, 0);
  assert.ok(m.nextn_generated_tokens_total - before.nextn_generated_tokens_total < 900, 'the row ran on');
  // every request the engine took has its log line, one cut by its client too
  const cut = /completion stream: [^\n]*, cancelled\n/;
  for (let i = 0; i < 100 && !cut.test(server.log.slice(logAt)); i++) await sleep(20);
  assert.match(server.log.slice(logAt), cut);
});

test('malformed requests get OpenAI-style 4xx errors', async () => {
  const chat = (body) => raw('POST', '/v1/chat/completions', typeof body === 'string' ? body : JSON.stringify(body));
  const msgs = [user('hi')];
  // [body, status, message, param]: param is OpenAI's, the top-level field at fault (null: the body)
  const cases = [
    ['{"messages": [', 400, /JSON/, null], ['[1,2]', 400, /object/, null], [{ max_tokens: 5 }, 400, /messages/, 'messages'],
    [{ messages: [] }, 400, /messages/, 'messages'], [{ messages: msgs, max_tokens: -1 }, 400, /max_tokens/, 'max_tokens'],
    [{ messages: msgs, temperature: -1 }, 400, /temperature/, 'temperature'], [{ messages: msgs, n: 2 }, 400, /\bn\b/, 'n'],
    [{ messages: msgs, max_tokens: 100000 }, 400, /context length/, 'messages'], [{ messages: [{ content: 'x' }] }, 400, /role/, 'messages'],
    [{ messages: msgs, max_tokens: 2147483647 }, 400, /context length/, 'messages'], [{ messages: msgs, max_tokens: 0 }, 400, /max_tokens/, 'max_tokens'],
    [{ messages: msgs, stop: ['a', 'b', 'c', 'd', 'e'] }, 400, /stop/, 'stop'],
    // what nextn does not do is refused, not ignored
    [{ messages: msgs, logprobs: false, top_logprobs: 2 }, 400, /top_logprobs needs logprobs/, 'top_logprobs'],
    [{ messages: msgs, logprobs: true, top_logprobs: 21 }, 400, /at most 20/, 'top_logprobs'],
    [{ messages: msgs, response_format: { type: 'json_object' } }, 400, /only \{"type": "text"\}/, 'response_format'],
    [{ messages: msgs, tool_choice: 'required' }, 400, /cannot force a tool call/, 'tool_choice'],
    [{ messages: [{ role: 'user', content: [{ type: 'text', text: 'see' }, { type: 'image_url', image_url: { url: 'http://x/y.png' } }] }] },
      400, /messages\[0\]\.content\[1\]\.type must be "text"/, 'messages'],
    [{ messages: msgs, tools: [5] }, 400, /tools\[0\] must be an object/, 'tools'],
    // a tool call without a name is named, not a template error about a "dict object"
    [{ messages: [user('hi'), { role: 'assistant', tool_calls: [{ id: 'c', type: 'function' }] }] },
      400, /messages\[1\]\.tool_calls\[0\]\.function\.name must be a non-empty string/, 'messages'],
    // a message whose text got lost is refused, not answered as an empty turn
    [{ messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user' }] }, 400, /messages\[1\]\.content is required/, 'messages'],
    // the Qwen3.5 template iterates a tool call's arguments: ones that are not an object are named
    [{ messages: [user('hi'), { role: 'assistant', tool_calls: [{ id: 'c', type: 'function', function: { name: 'f', arguments: 'not json' } }] }] },
      400, /messages\[1\]\.tool_calls\[0\]\.function\.arguments is not a JSON object/, 'messages'],
  ];
  for (const [body, status, re, param] of cases) {
    const r = await chat(body);
    assert.equal(r.status, status, `${JSON.stringify(body)} -> ${r.status} ${r.text}`);
    assert.ok(r.json?.error?.message && r.json.error.type, `no error object for ${JSON.stringify(body)}`);
    assert.match(r.json.error.message, re);
    assert.equal(r.json.error.param, param, `param of ${JSON.stringify(body)}`);
  }
  // as the client library sees it
  const refused = await client().chat.completions.create({ model: 'default', messages: msgs, max_tokens: 3, response_format: { type: 'json_schema', json_schema: { name: 'x', schema: {} } } })
    .then(() => null, (e) => e);
  assert.ok(refused && refused.status === 400 && refused.param === 'response_format', `got ${refused}`);
  const big = await chat({ messages: [user('x'.repeat(70000))] });
  assert.equal(big.status, 413);
  // a chunked body (no Content-Length) is measured as it arrives: its pieces are
  // joined, and past --max-body it is refused all the same
  const joined = await chunked('/tokenize', ['{"prompt": "And God', ' said"}']);
  assert.match(joined.head, /^HTTP\/1\.1 200 /, joined.head);
  assert.equal(JSON.parse(joined.body).count, (await raw('POST', '/tokenize', '{"prompt": "And God said"}')).json.count);
  const bigChunked = await chunked('/v1/chat/completions', [`{"messages": [{"role": "user", "content": "${'x'.repeat(40000)}`,
    `${'x'.repeat(40000)}"}]}`]);
  assert.match(bigChunked.head, /^HTTP\/1\.1 413 /, bigChunked.head);
  assert.match(JSON.parse(bigChunked.body).error.message, /request body exceeds 65536 bytes/);
  // a completion prompt with no text has nothing to continue
  const empty = await raw('POST', '/v1/completions', JSON.stringify({ prompt: '', max_tokens: 1 }));
  assert.equal(empty.status, 400, empty.text);
  assert.match(empty.json.error.message, /the prompt is empty/);
  assert.equal(empty.json.error.param, 'prompt');
  // libmicrohttpd's own complaints (here a broken chunked body) are log lines like the
  // server's, with a time, not raw text on stderr
  const logAt = server.log.length;
  await new Promise((resolve) => {
    const sock = net.connect({ port: server.port, host: '127.0.0.1' }, () =>
      sock.end('POST /health HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nZZ\r\nxx\r\n'));
    sock.on('data', () => {});
    sock.on('error', resolve);
    sock.on('close', resolve);
  });
  for (let i = 0; i < 100 && !/chunked/.test(server.log.slice(logAt)); i++) await sleep(20);
  const lines = server.log.slice(logAt).split('\n').filter((l) => l);
  assert.ok(lines.some((l) => /http: .*chunked/.test(l)), `no libmicrohttpd line: ${lines}`);
  for (const l of lines) assert.match(l, /^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d /, 'a log line without its time');
  assert.equal((await raw('GET', '/v1/nothing')).status, 404);
  const notAllowed = await raw('GET', '/v1/chat/completions');
  assert.equal(notAllowed.status, 405);
  assert.equal(notAllowed.headers.get('allow'), 'POST');
  assert.equal((await raw('POST', '/v1/models')).headers.get('allow'), 'GET, HEAD');
  const wrongKey = await raw('GET', '/v1/models', undefined, { Authorization: 'Bearer wrong' });
  assert.equal(wrongKey.status, 401);
  assert.equal(wrongKey.json.error.code, 'invalid_api_key');
  assert.equal((await raw('GET', '/v1/models', undefined, { Authorization: `bearer ${KEY}` })).status, 200, 'the scheme in any case');
  const dev = await chat({ messages: [{ role: 'developer', content: 'Answer briefly.' }, user('hi')], max_tokens: 2 });
  assert.equal(dev.status, 200, dev.text);
  assert.equal((await raw('GET', '/metrics', undefined, { Authorization: '' })).status, 401);
  const ok = await chat({ messages: msgs, max_tokens: 3, unknown_field: { deep: [1] }, logprobs: false, response_format: { type: 'text' }, tool_choice: 'auto' });
  assert.equal(ok.status, 200, 'unknown fields and the off values of refused ones pass');
});

test('conversations that share a long system prompt share its checkpoint', async () => {
  const system = { role: 'system', content: 'You are a scribe of the old books. '.repeat(12) + 'Answer in the words of the King James Bible.' };
  const first = await chatWhole([system, user('Who was Abraham?')]);
  const before = await metrics();
  const second = await chatWhole([system, user('Tell me of the flood.')]);
  const after = await metrics();
  assert.equal(after.nextn_cache_hits_total, before.nextn_cache_hits_total + 1, 'the second conversation missed');
  const reused = after.nextn_cache_hit_tokens_total - before.nextn_cache_hit_tokens_total;
  assert.ok(reused >= 64 && reused < second.usage.prompt_tokens, `reused ${reused} of ${second.usage.prompt_tokens}`);
  assert.equal(second.usage.prompt_tokens_details.cached_tokens, reused, 'usage reports what the cache gave');
  assert.ok(first.usage.prompt_tokens > 64);
});

// turns of one conversation, kept for the restart tests
let convo = null;

test('a multi-turn chat resumes from the prefix cache', async () => {
  const msgs = [{ role: 'system', content: 'You are a scribe of the old books.' }];
  const ttft = [];
  let lastPrompt = 0;
  for (let turn = 1; turn <= 5; turn++) {
    msgs.push(user(`Turn ${turn}: tell me more of the kings of Israel and of Judah, and of their wars.`));
    const before = await metrics();
    const s = await chatStream(msgs, { max_tokens: 48, stream_options: { include_usage: true } });
    const after = await metrics();
    ttft.push(s.ttft);
    if (turn > 1) {
      assert.equal(after.nextn_cache_hits_total, before.nextn_cache_hits_total + 1, `turn ${turn}: no cache hit`);
      const reused = after.nextn_cache_hit_tokens_total - before.nextn_cache_hit_tokens_total;
      assert.ok(reused >= lastPrompt - 8, `turn ${turn}: reused ${reused} of the previous ${lastPrompt}-token prompt`);
    }
    lastPrompt = s.usage.prompt_tokens;
    msgs.push({ role: 'assistant', content: s.content, reasoning_content: s.reasoning });
  }
  console.log(`  TTFT by turn (ms): ${ttft.map((t) => t.toFixed(1)).join(', ')} (prompt of turn 5: ${lastPrompt} tokens)`);
  convo = msgs;
});

test('the disk cache survives a restart and damaged files are misses', async () => {
  assert.ok(convo, 'needs the multi-turn test');
  const next = [...convo, user('And after them?')];
  const ref = await chatWhole(next, { max_tokens: 16 });
  assert.equal((await stopServer()).code, 0, 'clean exit on SIGTERM');
  assert.ok(fs.readdirSync(cacheDir).some((f) => f.endsWith('.nxc')), 'no cache files on disk');
  await startServer();
  let m0 = await metrics();
  const again = await chatWhole(next, { max_tokens: 16 });
  let m1 = await metrics();
  assert.equal(m1.nextn_cache_hits_total - m0.nextn_cache_hits_total, 1, 'no hit after the restart');
  assert.deepEqual(again.choices[0].message, ref.choices[0].message);
  // damage every file: a flipped byte in the state, or the file cut short
  assert.equal((await stopServer()).code, 0);
  const files = fs.readdirSync(cacheDir).filter((f) => f.endsWith('.nxc'));
  files.forEach((f, i) => {
    const p = path.join(cacheDir, f);
    const b = fs.readFileSync(p);
    if (i % 2) fs.writeFileSync(p, b.subarray(0, b.length >> 1));
    else { b[b.length - 64] ^= 0x5a; fs.writeFileSync(p, b); }
  });
  await startServer();
  m0 = await metrics();
  const third = await chatWhole(next, { max_tokens: 16 });
  m1 = await metrics();
  assert.deepEqual(third.choices[0].message, ref.choices[0].message, 'a damaged cache changed the answer');
  assert.ok(m1.nextn_cache_bad_files_total >= 1, 'damaged files were not noticed');
  assert.match(server.log, /prefix cache: .*(damaged|truncated)/);
});

test('a load test leaves no errors and no memory growth', async () => {
  // a 4 MB prefix cache fills in the first round; after that memory must stay flat
  await stopServer();
  await startServer(['--cache-ram', '4']);
  const rounds = 4, perRound = 16;
  const rss = [];
  for (let r = 0; r < rounds; r++) {
    const jobs = [];
    for (let i = 0; i < perRound; i++) {
      const msgs = [user(`Load ${r}-${i}: what is wisdom?`)];
      jobs.push(i % 2 ? chatWhole(msgs, { max_tokens: 12, temperature: 0.7, seed: i })
        : chatStream(msgs, { max_tokens: 12 }));
    }
    const out = await Promise.all(jobs);
    assert.equal(out.length, perRound);
    rss.push(rssKB(server.proc.pid));
  }
  // the last rows leave and streams close a moment after their clients got everything
  let m;
  for (let i = 0; i < 200; i++) {
    m = await metrics();
    if (m.nextn_batch_size === 0 && m.nextn_streams_open === 0) break;
    await sleep(25);
  }
  assert.equal(m.nextn_requests_failed_total, 0);
  assert.equal(m.nextn_batch_size, 0);
  assert.equal(m.nextn_streams_open, 0);
  console.log(`  RSS after each of ${rounds} rounds of ${perRound} requests (KB): ${rss.join(', ')}`);
  const growth = rss[rounds - 1] - rss[1];
  assert.ok(growth < 16 * 1024, `RSS grew by ${growth} KB from round 2 to round ${rounds}`);
});

test('SIGTERM ends open streams and waiting requests cleanly', async () => {
  // more requests than rows (4): some stream, some wait whole, some are queued
  const before = (await metrics()).nextn_generated_tokens_total;
  const pending = [];
  for (let i = 0; i < 10; i++) {
    const msgs = [user(`Recite the law, part ${i}.`)];
    pending.push((i % 2 ? chatWhole(msgs, { max_tokens: 900 }) : chatStream(msgs, { max_tokens: 900 }))
      .then((r) => ({ finish: r.finish || r.choices?.[0]?.finish_reason }), (e) => ({ error: e })));
  }
  // until the rows are decoding (a fixed wait was too short for a slow
  // build, e.g. under ThreadSanitizer, and nothing was cut yet)
  for (let i = 0; i < 400 && (await metrics()).nextn_generated_tokens_total < before + 16; i++) await sleep(50);
  const s = server;
  const exited = await stopServer();
  const out = await Promise.all(pending);
  assert.equal(exited.code, 0);
  // a request the shutdown cut still reports its speed (it logged 0.0 tok/s)
  const cutLines = [...s.log.matchAll(/output (\d+), ttft \d+ ms, ([\d.]+) tok\/s[^\n]*, cancelled/g)].filter((x) => +x[1] > 1);
  assert.ok(cutLines.length > 0, 'no request was cut by the shutdown');
  for (const x of cutLines) assert.ok(+x[2] > 0, `logged ${x[0]}`);
  out.forEach((o, i) => {
    assert.ok(!o.error, `request ${i} broke: ${o.error}`);
    assert.ok(['length', 'stop'].includes(o.finish), `request ${i}: finish_reason ${o.finish}`);
  });
  // 900 tokens take longer than that: answers cut by the shutdown say "length"
  assert.ok(out.some((o) => o.finish === 'length'), 'no answer was cut');
});

// ---- runner ------------------------------------------------------------------------

let failed = 0;
try {
  await startServer();
  for (const t of tests) {
    const t0 = performance.now();
    try {
      if (!server) await startServer();
      await t.fn();
      console.log(`ok   ${t.name} (${((performance.now() - t0) / 1000).toFixed(1)} s)`);
    } catch (e) {
      failed++;
      console.log(`FAIL ${t.name}: ${e.stack || e}`);
      if (server?.exited) { // a server that died says why; the next test starts another
        console.log(`the server exited (${JSON.stringify(server.exited)}); its log:\n${server.log}`);
        server = null;
      }
    }
  }
} finally {
  const log = server?.log;
  await stopServer();
  if (failed && log) console.log(`server log:\n${log}`);
}
console.log(`${tests.length - failed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
