// openai_client.mjs BASE_URL API_KEY — the official `openai` npm package (tools/fetch-openai.sh)
// against `specula serve`: a streaming chat completion, a non-streaming chat completion and a
// non-streaming completion. Prints "... ok" lines; exits non-zero on any mismatch.
import { createRequire } from "node:module";
import path from "node:path";
const require = createRequire(path.resolve(".cache/openai-client/package.json"));
const OpenAI = require("openai").default ?? require("openai");

const [baseURL, apiKey] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 60000 });
const fail = (msg) => { console.error("FAIL " + msg); process.exit(1); };

const messages = [{ role: "system", content: "You write Python." }, { role: "user", content: "def square(x):" }];

const stream = await client.chat.completions.create({
  model: "specula-default", messages, max_tokens: 24, temperature: 0, stream: true,
  stream_options: { include_usage: true },
});
let streamed = "", chunks = 0, usage = null, finish = null;
for await (const chunk of stream) {
  chunks++;
  if (chunk.usage) usage = chunk.usage;
  const c = chunk.choices[0];
  if (c?.delta?.content) streamed += c.delta.content;
  if (c?.finish_reason) finish = c.finish_reason;
}
if (chunks < 2 || !usage || usage.completion_tokens < 1 || !finish) fail(`stream: ${chunks} chunks, usage ${JSON.stringify(usage)}`);
console.log(`stream ok: ${chunks} chunks, ${usage.completion_tokens} tokens, finish ${finish}`);

const chat = await client.chat.completions.create({ model: "specula-default", messages, max_tokens: 24, temperature: 0 });
if (chat.choices[0].message.content !== streamed) fail(`chat text differs from the stream: ${JSON.stringify(chat.choices[0].message.content)} vs ${JSON.stringify(streamed)}`);
if (chat.usage.completion_tokens !== usage.completion_tokens) fail("chat usage differs from the stream's");
console.log("chat ok: same text as the stream");

const cmpl = await client.completions.create({ model: "specula-default", prompt: "import os\nimport", max_tokens: 16, temperature: 0 });
if (typeof cmpl.choices[0].text !== "string" || cmpl.choices[0].text.length === 0 || cmpl.usage.completion_tokens < 1) fail(`completion: ${JSON.stringify(cmpl)}`);
console.log(`completion ok: ${JSON.stringify(cmpl.choices[0].text)}`);

try {
  await client.chat.completions.create({ model: "x", messages, n: 2 });
  fail("n = 2 was accepted");
} catch (e) {
  if (e.status !== 400) fail(`n = 2: status ${e.status}`);
}
console.log("errors ok: n = 2 -> 400");
