// The pi side of the request differential: runs each job's conversation through
// pi-agent-core's Agent with pi-ai's real `streamSimple` (1.4.0, or 1.6.0 / 1.6.1 run from
// pi16/), the model's baseUrl at
// the capture server (request_capture.py), which records the requests. Prints per job key
// {"ok": true} or {"driverError": "..."}; the requests themselves are the server's record.
// The conversation format is request_conversations.py's; request_driver.py is piagent's mirror.
// usage: node pi_request_driver.mjs <jobs.json>
//   jobs.json: {"jobs": [{"key", "model", "conversation"}]}
import { readFileSync } from "node:fs";
import { Agent } from "@earendil-works/pi-agent-core";
import { streamSimple } from "@earendil-works/pi-ai/compat";
import { OPENAI_MODELS } from "@earendil-works/pi-ai/providers/openai.models";
import { ANTHROPIC_MODELS } from "@earendil-works/pi-ai/providers/anthropic.models";
import { GOOGLE_MODELS } from "@earendil-works/pi-ai/providers/google.models";

const CATALOGUE = { openai: OPENAI_MODELS, anthropic: ANTHROPIC_MODELS, google: GOOGLE_MODELS };

const WAIT_MS = 10000;
const KEY = "sk-request-differential";
const PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";
const spec = JSON.parse(readFileSync(process.argv[2], "utf8"));
let clock = 1700000000000;
const now = () => ++clock;

const text = (t) => ({ type: "text", text: t });
const image = () => ({ type: "image", data: PNG, mimeType: "image/png" });
const result = (content, isError = false) => ({ content, details: {}, ...(isError ? { isError } : {}) });

const TOOLS = {
    weather: {
        description: "Weather of a city",
        parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
        run: (args) => result([text(`Sunny in ${args.city}`)]),
    },
    noargs: {
        description: "Takes nothing",
        parameters: { type: "object", properties: {} },
        run: () => result([text("pong")]),
    },
    fail: {
        description: "Always fails",
        parameters: { type: "object", properties: {} },
        run: () => { throw new Error("boom"); },
    },
    image: {
        description: "Returns an image",
        parameters: { type: "object", properties: {} },
        run: () => result([text("here"), image()]),
    },
    defs: {
        description: "Takes a point (a schema with $defs, as MCP servers send)",
        parameters: {
            type: "object", properties: { p: { $ref: "#/$defs/P" } }, required: ["p"],
            additionalProperties: false,
            $defs: { P: { type: "object", properties: { x: { type: "integer" } } } },
        },
        run: () => result([text("ok")]),
    },
    lookup: {
        description: "Looks a number up",
        parameters: { type: "object", properties: { n: { type: "integer" } } },
        run: (args) => result([text(`found ${args.n}`)]),
    },
    titled: {
        description: "A Pydantic-style schema (root title and description)",
        parameters: {
            title: "Point", description: "A point", type: "object",
            properties: { x: { title: "X", type: "integer", minimum: 0 } }, required: ["x"],
        },
        run: () => result([text("ok")]),
    },
};

let constrained;  // the running conversation's constrainedSampling for every tool, if any
function tool(name) {
    const { run, ...rest } = TOOLS[name];
    return { name, label: name, ...rest, ...(constrained ? { constrainedSampling: constrained } : {}),
             execute: async (id, args) => run(args) };
}

function userMessage(step) {
    const content = [text(step.prompt)];
    for (let i = 0; i < (step.images ?? 0); i++) content.push(image());
    return { role: "user", content, timestamp: now() };
}

const isToolResult = (m) => m.role === "toolResult";

function editMessages(agent, kind) {
    const messages = agent.state.messages;
    const target = messages.find(isToolResult);
    if (kind === "mutate") target.content[0].text = "[compacted]";
    else if (kind === "reassign") target.content = [text("[compacted]")];
    else if (kind === "replace") {
        agent.state.messages = messages.map((m) => (m === target ? { ...m, content: [text("[compacted]")] } : m));
    } else if (kind === "delete") {
        const index = messages.findIndex((m) => m.role === "user");
        messages.splice(index, 2);
    } else throw new Error(`unknown edit ${kind}`);
}

function transformFor(kind) {
    if (!kind) return undefined;
    return async (messages) => {
        const results = messages.filter(isToolResult);
        for (const m of results.slice(0, -1)) {
            if (kind === "mutate") m.content[0].text = "[compacted]";
            else m.content = [text("[compacted]")];
        }
        return messages;
    };
}

function markPayload(payload) {
    const list = payload.messages ?? payload.input ?? payload.contents;
    const last = list[list.length - 1];
    if (Array.isArray(last.content)) last.content[last.content.length - 1].cache_control = { type: "ephemeral" };
    else if (Array.isArray(last.parts)) last.parts[last.parts.length - 1].x_marker = true;
    else last.x_marker = true;
    return undefined;
}

/** pi's catalogued model at the capture server (job.model: provider, id, api, baseUrl), or
 * for one outside the catalogue the model piagent's get_model builds (its defaults). */
function resolveModel({ provider, id, api, baseUrl }) {
    const entry = CATALOGUE[provider]?.[id];
    if (entry) return { ...entry, api, baseUrl };
    return {
        id, name: id, api, provider, baseUrl, reasoning: false, input: ["text"],
        cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0 }, contextWindow: 128000, maxTokens: 16384,
    };
}

async function run({ model: modelSpec, conversation: conv }) {
    constrained = conv.constrained;
    const resolved = resolveModel(modelSpec);
    const model = conv.compat ? { ...resolved, compat: { ...resolved.compat, ...conv.compat } } : resolved;
    const agent = new Agent({
        initialState: {
            systemPrompt: conv.system,
            model,
            thinkingLevel: conv.thinking ?? "off",
            tools: conv.tools.map(tool),
        },
        streamFn: (m, context, options) => streamSimple(m, context, {
            ...options, maxRetries: 0, ...(conv.retention ? { cacheRetention: conv.retention } : {}),
        }),
        getApiKey: () => KEY,
        sessionId: conv.session,
        transformContext: transformFor(conv.transform),
        onPayload: conv.payload === "mark" ? markPayload : undefined,
    });
    let steer, abortAtText;
    agent.subscribe((event) => {
        if (steer && event.type === "tool_execution_end") {
            agent.steer({ role: "user", content: [text(steer)], timestamp: now() });
            steer = undefined;
        }
        if (abortAtText && event.type === "message_update" && event.assistantMessageEvent?.type === "text_delta") {
            abortAtText = false;
            agent.abort();
        }
    });
    for (const step of conv.steps) {
        if (step.prompt !== undefined) {
            steer = step.steer;
            abortAtText = step.abort === true;
            await agent.prompt(userMessage(step));
        } else if (step.follow_up !== undefined) {
            agent.followUp({ role: "user", content: [text(step.follow_up)], timestamp: now() });
            await agent.continue();
        } else if (step.continue) {
            await agent.continue();
        } else if (step.system !== undefined) {
            agent.state.messages.push({ role: "system", content: step.system, timestamp: now() });
        } else if (step.set_tools !== undefined) {
            agent.state.tools = step.set_tools.map(tool);
        } else if (step.thinking !== undefined) {
            agent.state.thinkingLevel = step.thinking;
        } else if (step.edit !== undefined) {
            editMessages(agent, step.edit);
        } else if (step.append !== undefined) {
            agent.state.messages.push(...structuredClone(step.append));
        } else throw new Error(`unknown step ${JSON.stringify(step)}`);
    }
    return { ok: true };
}

function withTimeout(promise) {
    let timer;
    const limit = new Promise((_, reject) => { timer = setTimeout(() => reject(new Error("timed out")), WAIT_MS * 3); });
    return Promise.race([promise, limit]).finally(() => clearTimeout(timer));
}

const out = {};
const queue = [...spec.jobs];
async function worker() {
    for (let job = queue.shift(); job !== undefined; job = queue.shift()) {
        try {
            out[job.key] = await withTimeout(run(job));
        } catch (error) {
            out[job.key] = { driverError: String(error?.stack ?? error) };
        }
    }
}
await Promise.all(Array.from({ length: 8 }, worker));
process.stdout.write(JSON.stringify(out));
