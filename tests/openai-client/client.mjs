// tests/openai-client/client.mjs - drives `k25 serve` with the official openai npm client
// (an independent implementation of the protocol) and prints what it parsed as one JSON line.
// usage: node client.mjs BASE_URL   (e.g. http://127.0.0.1:8000/v1); run by tests/test_serve.c
import OpenAI from "openai";

const client = new OpenAI({ baseURL: process.argv[2], apiKey: process.argv[3] || "none", maxRetries: 0 });
const out = {};

// a streamed chat completion: content pieces, finish reason, usage
let chat = { content: "", chunks: 0, finish_reason: null, usage: null, token_ids: [] };
const cs = await client.chat.completions.create({
  model: "tiny", messages: [{ role: "user", content: "Article 12. Notice." }], max_tokens: 12,
  temperature: 0, stream: true, stream_options: { include_usage: true },
});
for await (const c of cs) {
  if (c.usage) chat.usage = c.usage;
  const ch = c.choices[0];
  if (!ch) continue;
  chat.chunks++;
  if (ch.delta && ch.delta.content) chat.content += ch.delta.content;
  if (ch.token_ids) chat.token_ids.push(...ch.token_ids);
  if (ch.finish_reason) chat.finish_reason = ch.finish_reason;
}
out.chat = chat;

// a streamed completion and the same one not streamed
let cmpl = { text: "", finish_reason: null, usage: null, token_ids: [] };
const st = await client.completions.create({
  model: "tiny", prompt: "Article 12. Notice.", max_tokens: 10, temperature: 0, stream: true,
  stream_options: { include_usage: true },
});
for await (const c of st) {
  if (c.usage) cmpl.usage = c.usage;
  const ch = c.choices[0];
  if (!ch) continue;
  cmpl.text += ch.text;
  if (ch.token_ids) cmpl.token_ids.push(...ch.token_ids);
  if (ch.finish_reason) cmpl.finish_reason = ch.finish_reason;
}
out.completion = cmpl;
const whole = await client.completions.create({ model: "tiny", prompt: "Article 12. Notice.", max_tokens: 10, temperature: 0 });
out.completion_whole = { text: whole.choices[0].text, usage: whole.usage, token_ids: whole.choices[0].token_ids,
                         finish_reason: whole.choices[0].finish_reason };

// an error the client must surface as an APIError with the status
try {
  await client.completions.create({ model: "no-such-model", prompt: "x", max_tokens: 1 });
  out.error = null;
} catch (e) {
  out.error = { status: e.status ?? null, message: e.message };
}
const models = await client.models.list();
out.models = models.data.map((m) => m.id);
console.log(JSON.stringify(out));
