// The web chat page at / in headless Chromium, driven over the DevTools protocol: the page
// lists no document, a pasted one is compressed through the page, a message is sent, the
// streamed reply appears, equals the server's non-streamed answer to the same request, and the
// turn shows the KV bytes saved. A screenshot is saved as OUT_DIR/chat_page.png.
// Usage: node chat_page.mjs SNAPKV MODEL OUT_DIR CHROMIUM (Node >= 18: a minimal WebSocket
// client is below, since Node 18's runtime has none).
import { spawn } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { connect } from "node:net";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const [snapkv, model, outDir, chromium] = process.argv.slice(2);
const children = [];
const profile = mkdtempSync(join(tmpdir(), "snapkv_chromium_"));

// Each child leads its own process group (spawn's `detached`), so the whole group goes: Chromium's
// helper processes too, which would otherwise keep writing into the profile being removed.
function finish(code, message) {
  if (message) console.error(message);
  for (const c of children) {
    try {
      process.kill(-c.pid, "SIGKILL");
    } catch {
      c.kill("SIGKILL");
    }
  }
  try {
    rmSync(profile, { recursive: true, force: true, maxRetries: 10, retryDelay: 100 });
  } catch (e) {
    console.error(`warning: could not remove ${profile}: ${e.message}`);
  }
  process.exit(code);
}
setTimeout(() => finish(1, "FAIL: the test ran past its 150 s bound"), 150000).unref();

// Starts a process and resolves with the first match of `pattern` in its stderr.
function start(cmd, args, pattern, what) {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { stdio: ["ignore", "ignore", "pipe"], detached: true });
    children.push(child);
    let err = "";
    child.stderr.on("data", (d) => {
      err += d;
      const m = err.match(pattern);
      if (m) resolve(m);
    });
    child.on("exit", (code) => reject(new Error(`${what} exited (${code}): ${err}`)));
  });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// A WebSocket client for the DevTools protocol (RFC 6455: masked client frames, text messages,
// unfragmented frames from the server as Chromium sends them). onmessage(text) per message.
function openSocket(url) {
  const u = new URL(url);
  return new Promise((resolve, reject) => {
    const sock = connect(Number(u.port), u.hostname);
    const key = randomBytes(16).toString("base64");
    const ws = { onmessage: () => {} };
    let buf = Buffer.alloc(0), open = false;
    sock.on("error", reject);
    sock.on("connect", () => {
      sock.write(`GET ${u.pathname} HTTP/1.1\r\nHost: ${u.host}\r\nUpgrade: websocket\r\n` +
                 `Connection: Upgrade\r\nSec-WebSocket-Key: ${key}\r\n` +
                 "Sec-WebSocket-Version: 13\r\n\r\n");
    });
    sock.on("data", (d) => {
      buf = Buffer.concat([buf, d]);
      if (!open) {
        const end = buf.indexOf("\r\n\r\n");
        if (end < 0) return;
        const head = buf.subarray(0, end).toString();
        const accept = createHash("sha1")
            .update(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").digest("base64");
        if (!head.startsWith("HTTP/1.1 101") || !head.includes(accept)) {
          reject(new Error("websocket handshake refused: " + head));
          return;
        }
        buf = buf.subarray(end + 4);
        open = true;
        resolve(ws);
      }
      for (;;) {
        if (buf.length < 2) return;
        let len = buf[1] & 0x7f, at = 2;
        if (len === 126) { if (buf.length < 4) return; len = buf.readUInt16BE(2); at = 4; }
        else if (len === 127) { if (buf.length < 10) return; len = Number(buf.readBigUInt64BE(2)); at = 10; }
        if (buf.length < at + len) return;
        const opcode = buf[0] & 0x0f, payload = buf.subarray(at, at + len);
        buf = buf.subarray(at + len);
        if (opcode === 1) ws.onmessage(payload.toString());
      }
    });
    ws.send = (text) => {
      const payload = Buffer.from(text);
      const n = payload.length;
      const head = n < 126 ? Buffer.from([0x81, 0x80 | n])
                 : n < 65536 ? Buffer.from([0x81, 0x80 | 126, n >> 8, n & 0xff])
                 : Buffer.concat([Buffer.from([0x81, 0x80 | 127]),
                                  (() => { const b = Buffer.alloc(8); b.writeBigUInt64BE(BigInt(n)); return b; })()]);
      const mask = randomBytes(4);
      const masked = Buffer.alloc(n);
      for (let i = 0; i < n; ++i) masked[i] = payload[i] ^ mask[i & 3];
      sock.write(Buffer.concat([head, mask, masked]));
    };
    ws.close = () => sock.destroy();
  });
}

async function main() {
  const [, port] = await start(snapkv, ["serve", "--model", model, "--port", "0", "--no-chat",
      "--threads", "1", "--window", "8"], /listening on http:\/\/127\.0\.0\.1:(\d+)/, "snapkv serve");
  const base = `http://127.0.0.1:${port}`;
  const [, devtools] = await start(chromium, ["--headless=new", "--disable-gpu", "--no-sandbox",
      "--no-first-run", "--remote-debugging-port=0", `--user-data-dir=${profile}`,
      "--window-size=1200,800", "about:blank"], /DevTools listening on (ws:\/\/\S+)/, "chromium");
  const http = devtools.replace(/^ws:\/\//, "http://").replace(/\/devtools\/.*$/, "");
  const targets = await (await fetch(`${http}/json/list`)).json();
  const page = targets.find((t) => t.type === "page");
  if (!page) throw new Error("no page target in " + JSON.stringify(targets));

  const ws = await openSocket(page.webSocketDebuggerUrl);
  let next = 1;
  const pending = new Map();
  ws.onmessage = (text) => {
    const msg = JSON.parse(text);
    if (msg.id && pending.has(msg.id)) {
      pending.get(msg.id)(msg);
      pending.delete(msg.id);
    }
  };
  const send = (method, params = {}) => new Promise((resolve, reject) => {
    const id = next++;
    pending.set(id, (msg) => (msg.error ? reject(new Error(method + ": " + msg.error.message))
                                        : resolve(msg.result)));
    ws.send(JSON.stringify({ id, method, params }));
  });
  const evaluate = async (expression) => {
    const r = await send("Runtime.evaluate", { expression, returnByValue: true, awaitPromise: true });
    if (r.exceptionDetails) throw new Error("page: " + JSON.stringify(r.exceptionDetails));
    return r.result.value;
  };
  const waitFor = async (expression, what, ms = 60000) => {
    const until = Date.now() + ms;
    while (Date.now() < until) {
      const v = await evaluate(expression);
      if (v) return v;
      await sleep(100);
    }
    throw new Error("timed out waiting for " + what);
  };

  await send("Page.enable");
  await send("Page.navigate", { url: base + "/" });
  await waitFor(`document.readyState === "complete" && !!document.getElementById("send")`,
                "the page");
  await waitFor(`document.getElementById("status").textContent.includes("0 cached documents")`,
                "the empty document list");

  // Paste a document, compress it through the page.
  const documentText = "The grass is green. The sky is blue. The pass key is 48213. " +
      "Remember it. The sun is yellow. 48213 is the pass key.";
  await evaluate(`document.getElementById("doc-text").value = ${JSON.stringify(documentText)};
                  document.getElementById("method").value = "snapkv+kivi2";
                  document.getElementById("keep").value = "0.5";
                  document.getElementById("max-tokens").value = "12";
                  document.getElementById("compress").click(); true`);
  const id = await waitFor(`document.getElementById("doc-select").value`, "the compressed id");

  // Send a message; the streamed reply appears with the turn's KV accounting.
  const message = "What is the pass key?";
  await evaluate(`document.getElementById("input").value = ${JSON.stringify(message)};
                  document.getElementById("send").click(); true`);
  await waitFor(`(() => { const m = document.querySelector(".msg.assistant");
                          return m && m.dataset.done === "1"; })()`, "the streamed reply");
  const shown = await evaluate(`(() => { const m = document.querySelector(".msg.assistant");
      return {error: m.classList.contains("error"), text: m.querySelector(".text").textContent,
              kv: (m.querySelector(".kv") || {}).textContent || ""}; })()`);
  if (shown.error) throw new Error("the page shows an error: " + shown.text);

  // The same request, not streamed: the same text.
  const res = await fetch(base + "/v1/chat/completions", {
    method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ messages: [{ role: "user", content: message }], cache_id: id,
                           max_tokens: 12 })
  });
  const want = (await res.json()).choices[0].message.content;

  mkdirSync(outDir, { recursive: true });
  const shot = await send("Page.captureScreenshot", { format: "png" });
  writeFileSync(join(outDir, "chat_page.png"), Buffer.from(shot.data, "base64"));

  if (!shown.text) throw new Error("the reply is empty");
  if (shown.text !== want) {
    throw new Error(`streamed reply ${JSON.stringify(shown.text)} != answer ${JSON.stringify(want)}`);
  }
  if (!/^KV .* of .* fp16: saved /.test(shown.kv)) {
    throw new Error("no KV accounting under the reply: " + JSON.stringify(shown.kv));
  }
  console.log(`ok: ${id}: reply ${JSON.stringify(shown.text)}; ${shown.kv}; screenshot ` +
              join(outDir, "chat_page.png"));
  ws.close();
}

main().then(() => finish(0), (e) => finish(1, "FAIL: " + (e.stack || e)));
