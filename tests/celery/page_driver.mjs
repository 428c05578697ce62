// Runs the <script> of examples/django_celery's page against a minimal DOM, then plays a run's
// events to its EventSource, and prints what the page's log shows (one {cls, text} per row).
// stdin: {"html": the page, "runId": ..., "events": [[type, data], ...]}. No browser needed:
// the page only creates divs, sets their text and class, and listens to one EventSource.
import vm from "node:vm";

const input = JSON.parse(await new Promise((done) => {
  let text = "";
  process.stdin.on("data", (chunk) => { text += chunk; });
  process.stdin.on("end", () => done(text));
}));

function element(tag) {
  return {
    tagName: tag, className: "", textContent: "", value: "", children: [], parent: null,
    appendChild(child) { child.parent = this; this.children.push(child); return child; },
    remove() {
      if (this.parent) this.parent.children = this.parent.children.filter((c) => c !== this);
    },
  };
}

const byId = new Map();
for (const id of ["log", "text", "form", "steer", "stop"]) byId.set(id, element("div"));
const sources = [];
class EventSource {
  constructor(url) { this.url = url; this.listeners = new Map(); this.closed = false; sources.push(this); }
  addEventListener(type, fn) { this.listeners.set(type, [...(this.listeners.get(type) || []), fn]); }
  close() { this.closed = true; }
}

const context = vm.createContext({
  document: { getElementById: (id) => byId.get(id), createElement: element },
  EventSource,
  fetch: () => Promise.resolve({ json: () => Promise.resolve({}) }),
  JSON,
});
const script = input.html.match(/<script>([\s\S]*?)<\/script>/)[1];
vm.runInContext(script, context);
vm.runInContext(`follow(${JSON.stringify(input.runId)})`, context);
const source = sources[sources.length - 1];
for (const [type, data] of input.events) {
  if (source.closed) break;
  for (const listener of source.listeners.get(type) || []) listener({ data: JSON.stringify(data) });
}
const rows = byId.get("log").children.map((c) => ({ cls: c.className, text: c.textContent }));
process.stdout.write(JSON.stringify({ rows, closed: source.closed }));
