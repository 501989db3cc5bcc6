// tests/tokref/ref.mjs - Hugging Face's own tokenizers as the reference for k25's C tokenizer
// (issue 30): @huggingface/tokenizers (HF's JavaScript implementation) and, where it installed,
// @anush008/tokenizers (HF's Rust tokenizers as a native module).  Packages come from the cache
// that tests/tokref/setup.sh fills (K25_TOKREF_NPM, outside the repository).
//
//   node ref.mjs encode MODEL_DIR CORPUS.jsonl OUT.jsonl
//       CORPUS: one JSON string per line.  OUT: per line {"js": ids, "js_dec": text,
//       "rs": ids, "rs_dec": text} (rs: null where the native module is absent); decode
//       keeps special tokens and does no clean-up of spaces (tokenizers' decode).
//       The JS tokenizer is ~10x slower than the native one: where the native module is there
//       it encodes every K25_TOKREF_JS_EVERY-th string only (default 10; js null for the rest),
//       to report where the two implementations disagree.
//   node ref.mjs chat MODEL_DIR CHATS.json OUT.json
//       renders each chat of CHATS ([{messages, add_generation_prompt}]) with the folder's own
//       chat_template through @huggingface/jinja (transformers.js' Jinja); OUT: [text | null].
//   node ref.mjs bench MODEL_DIR FILE [SECONDS]
//       encode throughput of FILE on this thread, as JSON {"js": {...}, "rs": {...}}.
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";

const npm = process.env.K25_TOKREF_NPM;
if (!npm) {
  console.error("ref.mjs: K25_TOKREF_NPM (the npm cache folder from tests/tokref/setup.sh) is not set");
  process.exit(2);
}
const require = createRequire(path.join(npm, "package.json"));
const { Tokenizer } = require("@huggingface/tokenizers");
let native = null;
try {
  native = require("@anush008/tokenizers");
} catch (e) {
  native = null;
}

const [mode, dir, file, outOrSecs] = process.argv.slice(2);
const json = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8"));
const cfgPath = path.join(dir, "tokenizer_config.json");
const config = fs.existsSync(cfgPath) ? JSON.parse(fs.readFileSync(cfgPath, "utf8")) : {};
const js = new Tokenizer(json, config);
const rs = native ? native.Tokenizer.fromFile(path.join(dir, "tokenizer.json")) : null;
const decOpts = { skip_special_tokens: false, clean_up_tokenization_spaces: false };

async function encodeMode() {
  const lines = fs.readFileSync(file, "utf8").split("\n").filter((l) => l.length > 0);
  const out = fs.openSync(outOrSecs, "w");
  const every = Number(process.env.K25_TOKREF_JS_EVERY || (rs ? 10 : 1));
  let i = 0;
  for (const line of lines) {
    const text = JSON.parse(line);
    const r = { js: null, js_dec: null, rs: null, rs_dec: null };
    if (i++ % every === 0) {
      try {
        r.js = js.encode(text).ids;
        r.js_dec = js.decode(r.js, decOpts);
      } catch (e) {
        r.js = null;
      }
    }
    if (rs) {
      const enc = await rs.encode(text, null);
      r.rs = Array.from(enc.getIds());
      r.rs_dec = await rs.decode(r.rs, false);
    }
    fs.writeSync(out, JSON.stringify(r) + "\n");
  }
  fs.closeSync(out);
}

// K25_TOKREF_LINES=1: each line (with its newline) is one encode call, as `k25 tokenize --bench-lines`.
const byLines = process.env.K25_TOKREF_LINES === "1";
function lineSplit(text) {
  const out = [];
  let a = 0;
  while (a < text.length) {
    const nl = text.indexOf("\n", a);
    const e = nl < 0 ? text.length : nl + 1;
    out.push(text.slice(a, e));
    a = e;
  }
  return out;
}
async function timeIt(fn0, text, secs) {
  const fn = byLines
    ? async (t) => { let n = 0; for (const l of lineSplit(t)) n += (await fn0(l)).length; return { length: n }; }
    : fn0;
  let n = 0;
  const first = performance.now();
  n = (await fn(text)).length;
  const cold = performance.now() - first;
  let best = Infinity, total = 0, rounds = 0;
  while (total < secs * 1000 || rounds < 3) {
    const t0 = performance.now();
    await fn(text);
    const dt = performance.now() - t0;
    total += dt;
    best = Math.min(best, dt);
    rounds++;
  }
  const bytes = Buffer.byteLength(text, "utf8");
  return { tokens: n, bytes, cold_ms: cold, best_ms: best, rounds,
           tokens_per_s: n / (best / 1000), mb_per_s: bytes / 1e6 / (best / 1000) };
}

async function benchMode() {
  const text = fs.readFileSync(file, "utf8");
  const secs = Number(outOrSecs || 1);
  const r = { js: await timeIt((t) => js.encode(t).ids, text, secs), rs: null };
  if (rs)
    r.rs = await timeIt(async (t) => (await rs.encode(t, null)).getIds(), text, secs);
  console.log(JSON.stringify(r, null, 2));
}

function chatMode() {
  const { Template } = require("@huggingface/jinja");
  const chats = JSON.parse(fs.readFileSync(file, "utf8"));
  const tpl = new Template(config.chat_template);
  const tok = (t) => (typeof t === "string" ? t : t && t.content) || "";
  const out = chats.map((c) => {
    try {
      return tpl.render({ messages: c.messages, add_generation_prompt: c.add_generation_prompt,
                          bos_token: tok(config.bos_token), eos_token: tok(config.eos_token) });
    } catch (e) {
      return null;
    }
  });
  fs.writeFileSync(outOrSecs, JSON.stringify(out));
}

if (mode === "encode") await encodeMode();
else if (mode === "chat") chatMode();
else if (mode === "bench") await benchMode();
else {
  console.error("usage: node ref.mjs encode MODEL_DIR CORPUS.jsonl OUT.jsonl | bench MODEL_DIR FILE [SECONDS]");
  process.exit(2);
}
