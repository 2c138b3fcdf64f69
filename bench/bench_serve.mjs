// bench_serve.mjs — throughput and time-to-first-token of a running
// `nextn serve` (or any OpenAI-compatible server), with Node's own fetch (no
// packages needed).
//
//   node bench/bench_serve.mjs http://127.0.0.1:8080 [--parallel 1,4,8] [--tokens 64] [--rounds 2] [--turns 5]
//                              [--temperature 0] [--key KEY]
//
// For each parallel count P it sends P streaming chat requests at once
// (greedy, or sampled at --temperature without a seed, distinct prompts,
// `--tokens` each, rounds times) and prints the
// aggregate generated tokens per second (usage.completion_tokens over the
// wall time of the round, prefill included; the best round), the same over
// the server's decode time only (nextn's /metrics counters) and the median
// TTFT. Then one chat
// of `--turns` turns, each adding the previous answer and a new question,
// prints the TTFT of every turn: with the prefix cache it should not grow
// with the history.
const args = process.argv.slice(2);
const base = args[0];
if (!base || base.startsWith('--')) {
  console.error('usage: node bench/bench_serve.mjs URL [--parallel 1,4,8] [--tokens 64] [--rounds 2] [--turns 5] '
    + '[--temperature 0] [--key KEY]');
  process.exit(2);
}
const opt = (name, dflt) => {
  const i = args.indexOf(`--${name}`);
  return i > 0 ? args[i + 1] : dflt;
};
const parallel = opt('parallel', '1,4,8').split(',').map(Number);
const tokens = Number(opt('tokens', '64'));
const rounds = Number(opt('rounds', '2'));
const turns = Number(opt('turns', '5'));
const key = opt('key', 'none');
const temperature = Number(opt('temperature', '0'));
const whole = (x, lo) => Number.isInteger(x) && x >= lo;
if (!parallel.every((p) => whole(p, 1)) || !whole(tokens, 1) || !whole(rounds, 1) || !whole(turns, 0)
    || !(temperature >= 0)) {
  console.error('bench_serve: --parallel wants counts >= 1 (e.g. 1,4,8), --tokens and --rounds integers >= 1, '
    + '--turns an integer >= 0, --temperature a number >= 0');
  process.exit(2);
}

// One streaming chat request: { ttft (ms), completion tokens, reply text }.
async function chat(messages, maxTokens) {
  const t0 = performance.now();
  const r = await fetch(`${base}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${key}` },
    body: JSON.stringify({ messages, max_tokens: maxTokens, temperature, stream: true,
      stream_options: { include_usage: true }, chat_template_kwargs: { enable_thinking: false } }),
  });
  if (!r.ok) throw new Error(`HTTP ${r.status}: ${await r.text()}`);
  let ttft = null, completion = 0, text = '', buf = '';
  const dec = new TextDecoder();
  for await (const part of r.body) {
    buf += dec.decode(part, { stream: true });
    let at;
    while ((at = buf.indexOf('\n\n')) >= 0) {
      const ev = buf.slice(0, at).replace(/^data: /, '');
      buf = buf.slice(at + 2);
      if (ev === '[DONE]') continue;
      const j = JSON.parse(ev);
      if (j.usage) completion = j.usage.completion_tokens;
      const d = j.choices?.[0]?.delta;
      // the first generated token (the role chunk comes at once, before it)
      if (ttft === null && d && !d.role && Object.keys(d).length) ttft = performance.now() - t0;
      text += d?.content || '';
    }
  }
  if (ttft === null) ttft = performance.now() - t0; // nothing printable came: the end
  return { ttft, completion, text };
}

const median = (xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1];

// nextn's counters (other servers: none): generated tokens and decode seconds
async function counters() {
  try {
    const r = await fetch(`${base}/metrics`, { headers: { Authorization: `Bearer ${key}` } });
    const t = await r.text();
    const get = (name) => Number((new RegExp(`^${name} (\\S+)$`, 'm').exec(t) || [])[1]);
    return { gen: get('nextn_generated_tokens_total'), dec: get('nextn_decode_seconds_total') };
  } catch {
    return { gen: NaN, dec: NaN };
  }
}

try {
  await fetch(`${base}/v1/models`, { headers: { Authorization: `Bearer ${key}` } });
} catch (e) {
  console.error(`bench_serve: cannot reach ${base}: ${e.cause?.message || e.message}`);
  process.exit(1);
}
console.log(`server ${base}, ${tokens} tokens a request, best of ${rounds} rounds`);
console.log('parallel  aggregate tok/s  decode-only tok/s  median TTFT ms');
for (const p of parallel) {
  let best = 0, bestDecode = 0, ttfts = [];
  for (let r = 0; r < rounds; r++) {
    const c0 = await counters();
    const t0 = performance.now();
    const out = await Promise.all(Array.from({ length: p }, (_, i) =>
      chat([{ role: 'user', content: `Request ${r}-${i}: tell me a story about the number ${i}.` }], tokens)));
    const secs = (performance.now() - t0) / 1000;
    const total = out.reduce((a, o) => a + o.completion, 0);
    best = Math.max(best, total / secs);
    const c1 = await counters();
    bestDecode = Math.max(bestDecode, (c1.gen - c0.gen) / (c1.dec - c0.dec) || 0);
    ttfts.push(...out.map((o) => o.ttft));
  }
  console.log(`${String(p).padStart(8)}  ${best.toFixed(1).padStart(15)}  ${bestDecode.toFixed(1).padStart(17)}  ${median(ttfts).toFixed(0).padStart(14)}`);
}

const msgs = [{ role: 'system', content: 'You are a helpful assistant who answers at length.' }];
const ttft = [];
for (let t = 1; t <= turns; t++) {
  msgs.push({ role: 'user', content: `Question ${t}: what happened next in the story, and why did it matter so much to everyone?` });
  const o = await chat(msgs, tokens);
  ttft.push(o.ttft);
  msgs.push({ role: 'assistant', content: o.text });
}
console.log(`chat TTFT by turn (ms): ${ttft.map((x) => x.toFixed(0)).join(', ')}`);
