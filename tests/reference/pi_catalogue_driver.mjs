// The pi side of the catalogue tests (issue 51), run against tests/reference/pi16 (pi-ai 1.6.1).
// usage:
//   node pi_catalogue_driver.mjs catalogue        -> {provider: {id: model}}: every chat model of
//                                                    every provider module (providers/*.models.js)
//   node pi_catalogue_driver.mjs keys p1 p2 ...   -> {provider: [env vars] | null}: findEnvKeys
//                                                    with every candidate variable set
//   node pi_catalogue_driver.mjs requests <jobs.json>
//       jobs.json: {"jobs": [{"key", "model": {provider, id, api, baseUrl}, "conversation"}]}
//       runs each conversation (request_conversations.py's format: system, tools, thinking and
//       prompt steps) through pi-agent-core's Agent with pi-ai's streamSimple, the catalogued
//       model at the capture server; prints per key {"ok": true} or {"driverError": "..."}.
import { readdirSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { findEnvKeys, streamSimple } from "@earendil-works/pi-ai/compat";

const PROVIDERS_DIR = join(dirname(fileURLToPath(import.meta.resolve("@earendil-works/pi-ai/compat"))), "providers");

async function catalogue() {
    const out = {};
    for (const file of readdirSync(PROVIDERS_DIR).filter((f) => f.endsWith(".models.js")).sort()) {
        const provider = file.slice(0, -".models.js".length);
        const module = await import(`@earendil-works/pi-ai/providers/${provider}.models`);
        for (const [name, models] of Object.entries(module)) {
            if (!name.endsWith("_MODELS") || /_(IMAGE|CLASSIFIER)_MODELS$/.test(name)) continue;
            out[provider] = { ...(out[provider] ?? {}), ...models };
        }
    }
    return out;
}

function keys(providers) {
    const env = new Proxy({}, { get: (_, name) => (typeof name === "string" ? `set-${name}` : undefined) });
    return Object.fromEntries(providers.map((p) => [p, findEnvKeys(p, env) ?? null]));
}

const KEY = "sk-request-differential";
let clock = 1700000000000;
const now = () => ++clock;
const text = (t) => ({ type: "text", text: t });
const TOOLS = {
    weather: {
        description: "Weather of a city",
        parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
        run: (args) => ({ content: [text(`Sunny in ${args.city}`)], details: {} }),
    },
};
const tool = (name) => {
    const { run, ...rest } = TOOLS[name];
    return { name, label: name, ...rest, execute: async (id, args) => run(args) };
};

async function requests(path) {
    const { Agent } = await import("@earendil-works/pi-agent-core");
    const models = await catalogue();
    const spec = JSON.parse(readFileSync(path, "utf8"));
    const out = {};
    const queue = [...spec.jobs];
    async function worker() {
        for (let job = queue.shift(); job !== undefined; job = queue.shift()) {
            try {
                const { provider, id, api, baseUrl } = job.model;
                const entry = models[provider]?.[id];
                if (!entry) throw new Error(`pi-ai has no chat model ${provider}/${id}`);
                const conv = job.conversation;
                const agent = new Agent({
                    initialState: {
                        systemPrompt: conv.system, model: { ...entry, api, baseUrl },
                        thinkingLevel: conv.thinking ?? "off", tools: conv.tools.map(tool),
                    },
                    streamFn: (m, context, options) => streamSimple(m, context, { ...options, maxRetries: 0 }),
                    getApiKey: () => KEY,
                });
                for (const step of conv.steps) {
                    if (step.prompt === undefined) throw new Error(`unsupported step ${JSON.stringify(step)}`);
                    await agent.prompt({ role: "user", content: [text(step.prompt)], timestamp: now() });
                }
                out[job.key] = { ok: true };
            } catch (error) {
                out[job.key] = { driverError: String(error?.stack ?? error) };
            }
        }
    }
    await Promise.all(Array.from({ length: 8 }, worker));
    return out;
}

const [mode, ...rest] = process.argv.slice(2);
const result = mode === "catalogue" ? await catalogue()
    : mode === "keys" ? keys(rest)
    : mode === "requests" ? await requests(rest[0])
    : (() => { throw new Error(`unknown mode ${mode}`); })();
process.stdout.write(JSON.stringify(result));
