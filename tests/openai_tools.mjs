// openai_tools.mjs BASE_URL API_KEY — a two-step tool loop with the official `openai` npm package
// against `specula serve` (a template that renders tools): the model is forced into one call of
// get_weather (tool_choice naming it, parallel_tool_calls false), the call's result goes back as a tool message, and the
// next turn answers in text. Run without streaming, then streaming; the streamed call
// (delta.tool_calls chunks) and answer must equal the non-streamed ones (greedy).
// Prints "... ok" lines; exits non-zero on any mismatch.
import { createRequire } from "node:module";
import path from "node:path";
const require = createRequire(path.resolve(".cache/openai-client/package.json"));
const OpenAI = require("openai").default ?? require("openai");

const [baseURL, apiKey] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 120000 });
const fail = (msg) => { console.error("FAIL " + msg); process.exit(1); };

const tools = [{
  type: "function",
  function: {
    name: "get_weather", description: "The weather in a city",
    parameters: { type: "object", properties: { city: { type: "string", maxLength: 8 }, days: { type: "integer" } },
                  required: ["city"], additionalProperties: false },
  },
}, {
  type: "function",
  function: { name: "get_time", description: "The time in a city", parameters: { type: "object", properties: {} } },
}];
const first = [{ role: "user", content: "What is the weather in Paris?" }];
const forced = { type: "function", function: { name: "get_weather" } };
const base = { model: "specula-default", tools, max_tokens: 200, temperature: 0 };

function checkCall(call, what) {
  if (!call || call.type !== "function" || call.function.name !== "get_weather" || typeof call.id !== "string")
    fail(`${what}: call ${JSON.stringify(call)}`);
  let args;
  try { args = JSON.parse(call.function.arguments); } catch (e) { fail(`${what}: arguments are not JSON: ${call.function.arguments}`); }
  if (typeof args.city !== "string" || args.city.length > 8 || Object.keys(args).some((k) => k !== "city" && k !== "days"))
    fail(`${what}: arguments do not follow the schema: ${call.function.arguments}`);
}

const followUp = (call) => [...first, { role: "assistant", content: null, tool_calls: [call] },
  { role: "tool", tool_call_id: call.id, content: JSON.stringify({ temperature: 21, sky: "clear" }) }];

// non-streaming: call -> tool result -> answer
const r1 = await client.chat.completions.create({ ...base, messages: first, tool_choice: forced, parallel_tool_calls: false });
const c1 = r1.choices[0];
if (c1.finish_reason !== "tool_calls" || c1.message.tool_calls?.length !== 1) fail(`step 1: ${JSON.stringify(c1)}`);
checkCall(c1.message.tool_calls[0], "step 1");
const r2 = await client.chat.completions.create({ ...base, max_tokens: 24, messages: followUp(c1.message.tool_calls[0]), tool_choice: "auto" });
const c2 = r2.choices[0];
if (typeof c2.message.content !== "string" || c2.message.content.length === 0 || c2.message.tool_calls?.length)
  fail(`step 2: ${JSON.stringify(c2)}`);
console.log(`tool loop ok: ${c1.message.tool_calls[0].function.arguments} -> ${JSON.stringify(c2.message.content)}`);

// streaming: the same two steps, the call assembled from delta.tool_calls
const s1 = await client.chat.completions.create({ ...base, messages: first, tool_choice: forced, parallel_tool_calls: false,
                                               stream: true });
const calls = [];
let finish = null, text = "";
for await (const chunk of s1) {
  const ch = chunk.choices[0];
  if (!ch) continue;
  if (ch.delta?.content) text += ch.delta.content;
  for (const d of ch.delta?.tool_calls ?? []) {
    const c = (calls[d.index] ??= { id: "", type: "function", function: { name: "", arguments: "" } });
    if (d.id) c.id = d.id;
    if (d.function?.name) c.function.name += d.function.name;
    if (d.function?.arguments) c.function.arguments += d.function.arguments;
  }
  if (ch.finish_reason) finish = ch.finish_reason;
}
if (finish !== "tool_calls" || calls.length !== 1 || text !== "") fail(`stream step 1: ${finish} ${JSON.stringify(calls)} text ${JSON.stringify(text)}`);
checkCall(calls[0], "stream step 1");
if (calls[0].function.arguments !== c1.message.tool_calls[0].function.arguments) fail("streamed arguments differ from the non-streamed ones");
const s2 = await client.chat.completions.create({ ...base, max_tokens: 24, messages: followUp(calls[0]), tool_choice: "auto", stream: true });
let answer = "";
for await (const chunk of s2) answer += chunk.choices[0]?.delta?.content ?? "";
if (answer !== c2.message.content) fail(`stream step 2: ${JSON.stringify(answer)} vs ${JSON.stringify(c2.message.content)}`);
console.log("stream tool loop ok: same call and answer as without streaming");

try {
  await client.chat.completions.create({ ...base, messages: first, tools: [{ type: "function", function: { description: "no name" } }] });
  fail("a tool without a name was accepted");
} catch (e) {
  if (e.status !== 400 || !String(e.message).includes("tools[0].function.name")) fail(`bad tools: ${e.status} ${e.message}`);
}
console.log("errors ok: a tool without a name -> 400");
