// compare.mjs - the official `openai` client against Strata's HTTP API and,
// side by side, llama.cpp's llama-server serving the same GGUF (issue 15's
// acceptance). Run by tests/cluster/openai_client.py:
//   node compare.mjs STRATA_URL STRATA_KEY LLAMA_URL MODEL_ID
// LLAMA_URL '-': Strata alone (the client's view of every answer, stream,
// usage chunk, error and abort); the checks against llama-server (its
// prompt_tokens and greedy texts) are then not made, and the last line
// says so. Prints one line per check and exits 1 when a check fails.
import OpenAI from 'openai';

const [strataUrl, strataKey, llamaUrl, modelId] = process.argv.slice(2);
const strata = new OpenAI({ baseURL: strataUrl + '/v1', apiKey: strataKey, maxRetries: 0 });
const llama = llamaUrl === '-' ? null :
  new OpenAI({ baseURL: llamaUrl + '/v1', apiKey: 'none', maxRetries: 0 });
const MAX = 24;
let failed = 0;

function check(ok, what) {
  console.log((ok ? 'ok   ' : 'FAIL ') + what);
  if (!ok) failed++;
}

const conversations = [
  [{ role: 'user', content: 'Hello!' }],
  [{ role: 'system', content: 'You are a helpful assistant.' },
   { role: 'user', content: 'What is the capital of France?' }],
  [{ role: 'user', content: 'Write a haiku about the sea.' }],
  [{ role: 'system', content: 'Answer in one word.' },
   { role: 'user', content: 'Name a colour.' },
   { role: 'assistant', content: 'Blue.' },
   { role: 'user', content: 'Another one?' }],
  [{ role: 'user', content: 'Count from one to five: ' }],
  [{ role: 'user', content: 'Ünïcödé, emoji 🚀 and "quotes" <tags> & more.' }],
];

async function collect(stream) {
  let text = '', finish = null, usage = null, n = 0, role = null;
  for await (const ch of stream) {
    n++;
    if (ch.usage) usage = ch.usage;
    for (const c of ch.choices) {
      if (c.delta && c.delta.role) role = c.delta.role;
      text += (c.delta ? c.delta.content : c.text) || '';
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  return { text, finish, usage, n, role };
}

// reference - llama-server's answer. Its chat-output parser refuses some
// of the random-weight model's texts (a 500 "does not match the expected
// Content-only format"); its prompt_tokens then come from the same request
// with max_tokens 1, and its text counts as different.
async function reference(req) {
  try {
    return await llama.chat.completions.create(req);
  } catch (e) {
    if (!(e instanceof OpenAI.APIError) || e.status !== 500) throw e;
    console.log(`     llama-server refused its own output (${e.message}); prompt_tokens from max_tokens 1`);
    const one = await llama.chat.completions.create({ ...req, max_tokens: 1 });
    return { usage: one.usage, choices: [{ message: { content: null } }] };
  }
}

// answered - what every answer owes the client alone: a text, a finish
// reason of the API's, usage counts that add up, and at most MAX ids.
function answered(what, a, text) {
  const u = a.usage;
  check(typeof text === 'string' && ['stop', 'length'].includes(a.choices[0].finish_reason) &&
    u && u.prompt_tokens > 0 && u.completion_tokens >= 0 && u.completion_tokens <= MAX &&
    u.total_tokens === u.prompt_tokens + u.completion_tokens &&
    (a.choices[0].finish_reason !== 'length' || u.completion_tokens === MAX),
    `${what}: answer (${a.choices[0].finish_reason}, usage ${u && u.prompt_tokens}+${u && u.completion_tokens})`);
}

async function chats() {
  let same = 0;
  for (const [i, messages] of conversations.entries()) {
    const req = { model: modelId, messages, max_tokens: MAX, temperature: 0 };
    const a = await strata.chat.completions.create(req);
    const ta = a.choices[0].message.content;
    answered(`chat ${i}`, a, ta);
    if (llama) {
      const b = await reference(req);
      check(a.usage.prompt_tokens === b.usage.prompt_tokens,
        `chat ${i}: prompt_tokens strata ${a.usage.prompt_tokens} llama-server ${b.usage.prompt_tokens}`);
      const tb = b.choices[0].message.content;
      if (ta === tb) same++;
      console.log(`     chat ${i}: greedy text ${ta === tb ? 'equal' : 'differs'}: ${JSON.stringify(ta).slice(0, 60)} | ${JSON.stringify(tb).slice(0, 60)}`);
    }
    const s = await collect(await strata.chat.completions.create(
      { ...req, stream: true, stream_options: { include_usage: true } }));
    check(s.text === ta && s.finish === a.choices[0].finish_reason && s.role === 'assistant',
      `chat ${i}: streamed text and finish_reason (${s.finish}) equal the whole answer`);
    check(s.usage && s.usage.prompt_tokens === a.usage.prompt_tokens &&
      s.usage.completion_tokens === a.usage.completion_tokens, `chat ${i}: the usage chunk`);
  }
  if (llama)
    check(same * 2 > conversations.length,
      `greedy chat text equal to llama-server's on ${same} of ${conversations.length}`);
}

async function completions() {
  const prompts = ['The quick brown fox', 'Once upon a time', 'def fibonacci(n):'];
  let same = 0;
  for (const [i, prompt] of prompts.entries()) {
    const req = { model: modelId, prompt, max_tokens: MAX, temperature: 0 };
    const a = await strata.completions.create(req);
    answered(`completion ${i}`, a, a.choices[0].text);
    if (llama) {
      const b = await llama.completions.create(req);
      check(a.usage.prompt_tokens === b.usage.prompt_tokens,
        `completion ${i}: prompt_tokens strata ${a.usage.prompt_tokens} llama-server ${b.usage.prompt_tokens}`);
      if (a.choices[0].text === b.choices[0].text) same++;
    }
    const s = await collect(await strata.completions.create(
      { ...req, stream: true, stream_options: { include_usage: true } }));
    check(s.text === a.choices[0].text && s.finish === a.choices[0].finish_reason,
      `completion ${i}: streamed text equals the whole answer`);
    check(s.usage && s.usage.completion_tokens === a.usage.completion_tokens,
      `completion ${i}: the usage chunk`);
  }
  if (llama)
    check(same * 2 > prompts.length,
      `greedy completion text equal to llama-server's on ${same} of ${prompts.length}`);
}

async function expectError(what, status, f) {
  try {
    await f();
    check(false, `${what}: no error`);
  } catch (e) {
    check(e instanceof OpenAI.APIError && e.status === status && e.error && e.error.message,
      `${what}: ${e.constructor.name} ${e.status}: ${e.error ? e.error.message : e}`);
  }
}

async function errors() {
  const bad = new OpenAI({ baseURL: strataUrl + '/v1', apiKey: 'sk-wrong-key-0000', maxRetries: 0 });
  const messages = conversations[0];
  await expectError('wrong key', 401, () =>
    bad.chat.completions.create({ model: modelId, messages }));
  await expectError('unknown model', 404, () =>
    strata.chat.completions.create({ model: 'gpt-4o', messages }));
  await expectError('n = 2', 400, () =>
    strata.chat.completions.create({ model: modelId, messages, n: 2 }));
  await expectError('wrong type', 400, () =>
    strata.chat.completions.create({ model: modelId, messages, max_tokens: 'many' }));
}

async function aborts() {
  const streams = [];
  for (let i = 0; i < 20; i++) {
    const ac = new AbortController();
    streams.push((async () => {
      const s = await strata.chat.completions.create(
        { model: modelId, messages: [{ role: 'user', content: `Story ${i}` }], max_tokens: 200,
          stream: true }, { signal: ac.signal });
      let n = 0;
      try {
        for await (const ch of s) {
          if (ch.choices[0] && ch.choices[0].delta.content && ++n === 2) ac.abort();
        }
      } catch (e) {
        if (!(e instanceof OpenAI.APIUserAbortError) && e.name !== 'AbortError') throw e;
      }
      return n;
    })());
  }
  const got = await Promise.all(streams);
  check(got.every((n) => n >= 1), `20 streams aborted mid-way (tokens seen: ${got.join(',')})`);
  const r = await strata.chat.completions.create(
    { model: modelId, messages: conversations[1], max_tokens: 8 });
  check(['stop', 'length'].includes(r.choices[0].finish_reason),
    `a normal request after the aborts: finish_reason ${r.choices[0].finish_reason}`);
}

try {
  await chats();
  await completions();
  await errors();
  await aborts();
} catch (e) {
  console.log('FAIL exception: ' + (e.stack || e));
  failed++;
}
console.log(failed ? `${failed} checks failed` :
  llama ? 'all checks passed' : 'all checks of Strata alone passed (llama-server not compared)');
process.exit(failed ? 1 : 0);
