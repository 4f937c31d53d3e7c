// http-load.mjs - a load generator for Strata's HTTP API: C concurrent
// streaming /v1/completions clients (Node's own fetch, no dependency),
// each reading Server-Sent Events until [DONE]. Prints one JSON line:
// {"clients", "ok", "errors", "tokens", "wall_s", "tok_s", "itl_p50_ms",
//  "itl_p99_ms", "ttft_p50_ms"}; inter-token latency is the gap between
// consecutive text chunks a client received (its own clock).
//   node bench/http-load.mjs URL CLIENTS MAX_TOKENS PROMPT_LEN
const [url, clients, maxTokens, promptLen] = [process.argv[2], +process.argv[3],
  +process.argv[4], +process.argv[5]];

function pct(v, p) {
  if (v.length === 0) return null;
  const s = [...v].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(p / 100 * s.length))];
}

async function one(i, gaps, ttfts) {
  const prompt = Array.from({ length: promptLen }, (_, k) => 1 + ((i * 7919 + k * 104729) % 1000));
  const t0 = performance.now();
  const r = await fetch(url + '/v1/completions', {
    method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ prompt, max_tokens: maxTokens, temperature: 0, stream: true,
      stream_options: { include_usage: true } }),
  });
  if (r.status !== 200) throw new Error(`status ${r.status}: ${await r.text()}`);
  const dec = new TextDecoder();
  let buf = '', last = null, tokens = 0, done = false;
  for await (const chunk of r.body) {
    buf += dec.decode(chunk, { stream: true });
    let k;
    while ((k = buf.indexOf('\n\n')) >= 0) {
      const ev = buf.slice(0, k);
      buf = buf.slice(k + 2);
      if (!ev.startsWith('data: ')) continue;
      const data = ev.slice(6);
      if (data === '[DONE]') { done = true; continue; }
      const j = JSON.parse(data);
      if (j.error) throw new Error(j.error.message);
      if (j.usage) tokens = j.usage.completion_tokens;
      if (j.choices.length && j.choices[0].text) {
        const now = performance.now();
        if (last === null) ttfts.push(now - t0); else gaps.push(now - last);
        last = now;
      }
    }
  }
  if (!done) throw new Error('no [DONE]');
  return tokens;
}

const gaps = [], ttfts = [];
const t0 = performance.now();
const res = await Promise.allSettled(Array.from({ length: clients }, (_, i) => one(i, gaps, ttfts)));
const wall = (performance.now() - t0) / 1000;
const ok = res.filter((r) => r.status === 'fulfilled');
const tokens = ok.reduce((a, r) => a + r.value, 0);
const errors = res.filter((r) => r.status === 'rejected').map((r) => String(r.reason));
console.log(JSON.stringify({ clients, ok: ok.length, errors: errors.length, first_error: errors[0],
  tokens, wall_s: +wall.toFixed(3), tok_s: +(tokens / wall).toFixed(1),
  itl_p50_ms: pct(gaps, 50), itl_p99_ms: pct(gaps, 99), ttft_p50_ms: pct(ttfts, 50) }));
process.exit(errors.length ? 1 : 0);
