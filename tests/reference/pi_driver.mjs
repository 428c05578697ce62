// Runs reference scenarios through pi-agent-core 1.4.0 (the installed package) and prints
// each run's raw log as JSON. The Python side (piagent_driver.py) interprets the same
// scenario files the same way; normalise.py turns both raw logs into comparable form.
//
// usage: node pi_driver.mjs <scenario.json>... [--entry NAME]   → {"<name>": {"<entry>": output}}
//        node pi_driver.mjs --replay <transcript.json>           → replay check (transcripts)
//
// Every wait is bounded (LATCH_MS); no timing decides an order: tools finish by latches
// released on observed events.

import { readFileSync } from "node:fs";
import { basename } from "node:path";
import {
    Agent,
    agentLoop,
    agentLoopContinue,
    runAgentLoop,
    runAgentLoopContinue,
} from "@earendil-works/pi-agent-core";
import { createAssistantMessageEventStream, createInitialSystemMessage, getCurrentSystemPrompt, getCurrentTools, toToolDeclaration } from "@earendil-works/pi-ai";

const LATCH_MS = 5000;
const HANG_MS = 2500;
const MODEL = {
    id: "scripted",
    name: "Scripted model",
    api: "scripted",
    provider: "scripted",
    baseUrl: "https://example.invalid",
    reasoning: false,
    input: ["text"],
    cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0 },
    contextWindow: 128000,
    maxTokens: 4096,
};
const ZERO_USAGE = () => ({
    input: 0,
    output: 0,
    cacheRead: 0,
    cacheWrite: 0,
    totalTokens: 0,
    cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, total: 0 },
});

const clone = (value) => (value === undefined ? null : JSON.parse(JSON.stringify(value)));

/** Canonical JSON (sorted keys, compact), identical to the Python driver's. */
function canon(value) {
    if (Array.isArray(value)) return `[${value.map(canon).join(",")}]`;
    if (value !== null && typeof value === "object") {
        return `{${Object.keys(value)
            .sort()
            .map((k) => `${JSON.stringify(k)}:${canon(value[k])}`)
            .join(",")}}`;
    }
    return JSON.stringify(value ?? null);
}

function asMessage(spec) {
    if (typeof spec === "string") {
        return { role: "user", content: [{ type: "text", text: spec }], timestamp: Date.now() };
    }
    return { timestamp: Date.now(), ...clone(spec) };
}

/** The text an application message (a custom role) shows when convertToLlm maps it to a user message. */
function appText(message) {
    return `[${message.role}] ${message.text ?? message.command ?? ""}`;
}

/** Replace the contents of an array in place (its identity stays). */
function replaceInPlace(array, items) {
    array.splice(0, array.length, ...items);
}

/** Remove the entries of an array in place. */
function removeInPlace(array, unwanted) {
    for (let i = array.length - 1; i >= 0; i--) if (unwanted(array[i])) array.splice(i, 1);
}

/** Delete the tool declarations of the first system message, editing the message object. */
function clearToolsInPlace(messages) {
    const first = messages.find((m) => m.role === "system");
    if (first) {
        delete first.toolsAdded;
        delete first.toolsRemoved;
    }
}

function textBlock(text) {
    return [{ type: "text", text }];
}

function abortText(reason) {
    if (reason === undefined || reason === null) return "Operation aborted";
    if (typeof reason === "object" && reason.name === "AbortError") return "Operation aborted";
    return String(reason);
}

// ---------------------------------------------------------------- scripted stream function

const TEXT_CHUNK = /\S+\s*|\s+/g;

function chunks(text, size) {
    const pieces = [];
    let current = "";
    for (const match of text.matchAll(TEXT_CHUNK)) {
        current += match[0];
        if (current.length >= size) {
            pieces.push(current);
            current = "";
        }
    }
    if (current || pieces.length === 0) pieces.push(current);
    return pieces;
}

function snapshot(partial) {
    return { ...partial, content: partial.content.map((block) => ({ ...block })) };
}

/** The events of one scripted response, built block by block (as piagent.testing does). */
function* scriptedEvents(final, cut) {
    if ((final.stopReason === "error" || final.stopReason === "aborted") && final.content.length === 0) {
        yield [final, { type: "error", reason: final.stopReason, error: final }];
        return;
    }
    let partial = {
        role: "assistant",
        content: [],
        api: final.api,
        provider: final.provider,
        model: final.model,
        usage: ZERO_USAGE(),
        stopReason: "stop",
        timestamp: final.timestamp,
    };
    yield [partial, { type: "start", partial }];
    for (let index = 0; index < final.content.length; index++) {
        const block = final.content[index];
        if (block.type === "text" || block.type === "thinking") {
            const key = block.type;
            const start = { ...block, [key]: "" };
            partial = snapshot(partial);
            partial.content.push(start);
            yield [partial, { type: `${key}_start`, contentIndex: index, partial }];
            for (const piece of chunks(block[key], 12)) {
                partial = snapshot(partial);
                partial.content[index] = { ...partial.content[index], [key]: partial.content[index][key] + piece };
                yield [partial, { type: `${key}_delta`, contentIndex: index, delta: piece, partial }];
            }
            partial = snapshot(partial);
            partial.content[index] = { ...block };
            yield [partial, { type: `${key}_end`, contentIndex: index, content: block[key], partial }];
        } else if (block.type === "toolCall") {
            partial = snapshot(partial);
            partial.content.push({ ...block, arguments: {} });
            yield [partial, { type: "toolcall_start", contentIndex: index, partial }];
            const isCut = cut !== undefined && index === final.content.length - 1;
            const text = isCut ? cut : JSON.stringify(block.arguments);
            for (let start = 0; start < text.length; start += 16) {
                partial = snapshot(partial);
                yield [partial, { type: "toolcall_delta", contentIndex: index, delta: text.slice(start, start + 16), partial }];
            }
            if (isCut) break; // the stream fails inside this call's arguments: no toolcall_end
            partial = snapshot(partial);
            partial.content[index] = { ...block };
            yield [partial, { type: "toolcall_end", contentIndex: index, toolCall: block, partial }];
        } else {
            partial = snapshot(partial);
            partial.content.push(block);
        }
    }
    if (final.stopReason === "error" || final.stopReason === "aborted") {
        yield [final, { type: "error", reason: final.stopReason, error: final }];
    } else {
        yield [final, { type: "done", reason: final.stopReason, message: final }];
    }
}

/** A lazily produced stream: the next event is built only when the loop asks for it. */
class LazyStream {
    constructor(final, signal, cut) {
        this.final = final;
        this.signal = signal;
        this.cut = cut;
        this.promise = new Promise((resolve) => {
            this.resolve = resolve;
        });
    }
    async *[Symbol.asyncIterator]() {
        const source = scriptedEvents(this.final, this.cut);
        let partial = { ...this.final, content: [] };
        while (true) {
            if (this.signal?.aborted) {
                const message = snapshot(partial);
                message.stopReason = "aborted";
                message.errorMessage = abortText(this.signal.reason);
                this.resolve(message);
                yield { type: "error", reason: "aborted", error: message };
                return;
            }
            const step = source.next();
            if (step.done) return;
            const [next, event] = step.value;
            partial = next;
            if (event.type === "done") this.resolve(event.message);
            if (event.type === "error") this.resolve(event.error);
            yield event;
        }
    }
    result() {
        return this.promise;
    }
}

// ---------------------------------------------------------------- one run of a scenario

class Harness {
    constructor(scenario, entry) {
        this.s = clone(scenario);
        this.entry = entry;
        this.log = [];
        this.requests = 0;
        this.responses = (scenario.responses ?? []).map(clone);
        this.counts = new Map();
        this.actionsDone = new Set();
        this.started = new Set();
        this.ended = new Set();
        this.waiters = [];
        this.hookCounts = {};
        this.steering = [];
        this.followUps = [];
        this.agent = undefined;
        this.controller = undefined;
        this.toolsByName = new Map();
        for (const spec of scenario.tools ?? []) this.toolsByName.set(spec.name, this.makeTool(spec));
    }

    record(entry) {
        this.log.push(clone(entry));
    }

    hookCall(name) {
        this.hookCounts[name] = (this.hookCounts[name] ?? 0) + 1;
        return this.hookCounts[name];
    }

    get signal() {
        return this.agent ? this.agent.signal : this.controller?.signal;
    }

    abort(reason) {
        if (this.agent) this.agent.abort();
        else this.controller.abort(reason);
    }

    // ---- latches
    notify() {
        for (const waiter of [...this.waiters]) {
            if (waiter.ready()) {
                this.waiters.splice(this.waiters.indexOf(waiter), 1);
                waiter.resolve(true);
            }
        }
    }

    waitUntil(ready, signal) {
        if (ready()) return Promise.resolve(true);
        return new Promise((resolve) => {
            const waiter = { ready, resolve: () => {} };
            const timer = setTimeout(() => {
                this.waiters.splice(this.waiters.indexOf(waiter), 1);
                resolve(false);
            }, LATCH_MS);
            waiter.resolve = (value) => {
                clearTimeout(timer);
                resolve(value);
            };
            this.waiters.push(waiter);
            signal?.addEventListener("abort", () => this.notify(), { once: true });
        });
    }

    latchFor(toolCallId, signal) {
        const order = (this.s.finishOrder ?? []).find((group) => group.includes(toolCallId)) ?? [];
        const index = order.indexOf(toolCallId);
        if (index < 0) return Promise.resolve(true);
        const ready =
            index === 0
                ? () => order.every((id) => this.started.has(id)) || signal?.aborted
                : () => this.ended.has(order[index - 1]) || signal?.aborted;
        return this.waitUntil(ready, signal);
    }

    // ---- tools
    makeTool(spec) {
        const tool = {
            name: spec.name,
            label: spec.label ?? spec.name,
            description: spec.description ?? `The ${spec.name} tool`,
            parameters: clone(spec.parameters ?? { type: "object", properties: {} }),
            execute: async (toolCallId, params, signal, onUpdate) => {
                const behaviour = { ...(spec.default ?? {}), ...(spec.results?.[toolCallId] ?? {}) };
                const ok = await this.latchFor(toolCallId, signal);
                this.record({ kind: "execute", toolCallId, tool: spec.name, params });
                if (!ok) return { content: [{ type: "text", text: "LATCH TIMEOUT" }], details: {} };
                for (const update of behaviour.updates ?? []) onUpdate(clone(update));
                if (behaviour.steer) this.queueSteer(behaviour.steer);
                if (behaviour.followUp) this.queueFollowUp(behaviour.followUp);
                if (behaviour.abortRun) this.abort(behaviour.abortReason);
                if (behaviour.waitAbort) {
                    const aborted = await this.waitUntil(() => signal?.aborted, signal);
                    if (!aborted) return { content: [{ type: "text", text: "ABORT TIMEOUT" }], details: {} };
                }
                if (behaviour.throw) throw new Error(behaviour.throw);
                const result = {
                    content: clone(behaviour.content ?? [{ type: "text", text: behaviour.text ?? `${spec.name} ${canon(params)}` }]),
                    details: "details" in behaviour ? clone(behaviour.details) : { tool: spec.name },
                };
                if (behaviour.isError) result.isError = true;
                if (behaviour.terminate) result.terminate = true;
                if (behaviour.structuredContent !== undefined) result.structuredContent = clone(behaviour.structuredContent);
                if (behaviour.usage) result.usage = clone(behaviour.usage);
                return result;
            },
        };
        if (spec.executionMode) tool.executionMode = spec.executionMode;
        if (spec.prepareArguments) {
            tool.prepareArguments = (raw) => ({ ...raw, ...clone(spec.prepareArguments.merge ?? {}) });
        }
        return tool;
    }

    tools(names) {
        return names.map((name) => {
            const tool = this.toolsByName.get(name);
            if (!tool) throw new Error(`scenario ${this.s.name}: no tool ${name}`);
            return tool;
        });
    }

    initialTools() {
        return this.tools((this.s.tools ?? []).filter((t) => !t.hidden).map((t) => t.name));
    }

    // ---- queues (the loop entries' getters: one-at-a-time or all, like the Agent's)
    queueSteer(spec) {
        if (this.agent) this.agent.steer(asMessage(spec));
        else this.steering.push(asMessage(spec));
    }
    queueFollowUp(spec) {
        if (this.agent) this.agent.followUp(asMessage(spec));
        else this.followUps.push(asMessage(spec));
    }
    drain(queue, mode) {
        const taken = mode === "all" ? queue.splice(0) : queue.splice(0, 1);
        return taken;
    }

    // ---- the stream function
    streamFn() {
        return (model, context, options) => {
            this.requests += 1;
            const number = this.requests;
            this.record({
                kind: "request",
                n: number,
                model: model?.id ?? null,
                reasoning: options.reasoning ?? null,
                ...(options.temperature !== undefined ? { temperature: options.temperature } : {}),
                signalAborted: options.signal?.aborted === true,
                messages: context.messages,
                tools: getCurrentTools(context.messages).map((t) => t.name),
                systemPrompt: getCurrentSystemPrompt(context.messages),
            });
            let final = this.responses.shift();
            let timed = this.s.timedStream;
            if (final === undefined) {
                timed = true; // made at the request, as pi-ai's faux provider does: timed
                final = {
                    role: "assistant",
                    content: [],
                    api: model.api,
                    provider: model.provider,
                    model: model.id,
                    usage: ZERO_USAGE(),
                    stopReason: "error",
                    errorMessage: `ScriptedStreamFn has no scripted response left for request ${number}; add one with add_response() or set_responses().`,
                    timestamp: 1700000000000,
                };
            }
            final = { ...final };
            for (const key of ["api", "provider", "model"]) {
                if (final[key] === undefined || final[key] === "" || final[key] === "scripted") {
                    final[key] = key === "model" ? model.id : model[key];
                }
            }
            final.usage ??= ZERO_USAGE();
            final.timestamp ??= 1700000000000 + number;
            if (timed) {
                // pi-ai's own stream class: it times a response that starts after it was made
                const stream = createAssistantMessageEventStream();
                final.timestamp = Date.now(); // not before the stream was made: pi times it
                for (const [, event] of scriptedEvents(final)) stream.push(event);
                stream.end();
                return stream;
            }
            return new LazyStream(final, options.signal, this.s.cutToolCall?.[String(number)]);
        };
    }

    // ---- hooks
    matches(rule, toolCall) {
        const m = rule.match ?? {};
        if (m.toolCallId && m.toolCallId !== toolCall.id) return false;
        if (m.toolName && m.toolName !== toolCall.name) return false;
        return true;
    }

    hooks() {
        const h = this.s.hooks ?? {};
        const out = {};
        if (h.beforeToolCall) {
            out.beforeToolCall = async (ctx, signal) => {
                this.record({ kind: "hook", hook: "beforeToolCall", toolCallId: ctx.toolCall.id, args: ctx.args, messages: ctx.context.messages.length, aborted: signal?.aborted === true });
                const rule = h.beforeToolCall.find((r) => this.matches(r, ctx.toolCall));
                if (!rule) return undefined;
                if (rule.setArgs) Object.assign(ctx.args, clone(rule.setArgs));
                for (const [key, values] of Object.entries(rule.appendArgInPlace ?? {})) ctx.args[key].push(...clone(values));
                if (rule.abort) this.abort();
                if (rule.throw) throw new Error(rule.throw);
                if (rule.block) {
                    const result = { block: true };
                    if (rule.reason !== undefined) result.reason = rule.reason;
                    if (rule.terminate) result.terminate = true;
                    return result;
                }
                return undefined;
            };
        }
        if (h.afterToolCall) {
            out.afterToolCall = async (ctx, signal) => {
                this.record({ kind: "hook", hook: "afterToolCall", toolCallId: ctx.toolCall.id, isError: ctx.isError, result: ctx.result, aborted: signal?.aborted === true });
                const rule = h.afterToolCall.find((r) => this.matches(r, ctx.toolCall));
                if (!rule) return undefined;
                if (rule.throw) throw new Error(rule.throw);
                if (rule.appendContentInPlace) ctx.result.content.push(...clone(rule.appendContentInPlace));
                const result = {};
                for (const key of ["content", "details", "isError", "terminate", "structuredContent", "usage"]) {
                    if (key in rule) result[key] = clone(rule[key]);
                }
                return result;
            };
        }
        if (h.finishTurn) {
            out.finishTurn = async (turn, signal) => {
                const n = this.hookCall("finishTurn");
                this.record({ kind: "hook", hook: "finishTurn", n, stopReason: turn.message.stopReason, toolResults: turn.toolResults.length, newMessages: turn.newMessages.length, aborted: signal?.aborted === true });
                let rule = h.finishTurn[String(n)] ?? h.finishTurn["*"];
                if (rule !== null && typeof rule === "object") {
                    if (rule.editToolResultsInPlace !== undefined) {
                        for (const m of turn.toolResults) replaceInPlace(m.content, textBlock(rule.editToolResultsInPlace));
                    }
                    if (rule.appendInPlace !== undefined) turn.context.messages.push(asMessage(rule.appendInPlace));
                    rule = rule.action;
                }
                if (rule === undefined || rule === null) return undefined;
                if (rule === "throw") throw new Error("finishTurn failed");
                return { action: rule };
            };
        }
        if (h.prepareNextTurn) {
            out.prepareNextTurn = async (ctx) => {
                const n = this.hookCall("prepareNextTurn");
                this.record({ kind: "hook", hook: "prepareNextTurn", n, stopReason: ctx.message.stopReason, messages: ctx.context.messages.length, aborted: this.signal?.aborted === true });
                const rule = h.prepareNextTurn[String(n)];
                if (!rule) return undefined;
                if (rule.throw) throw new Error(rule.throw);
                const update = {};
                if (rule.replaceFirstSystem) ctx.context.messages[0] = asMessage(rule.replaceFirstSystem);
                if (rule.appendInPlace !== undefined) ctx.context.messages.push(asMessage(rule.appendInPlace));
                if (rule.toolsInPlace) replaceInPlace(ctx.context.tools, this.tools(rule.toolsInPlace));
                if (rule.clearToolsInPlace) clearToolsInPlace(ctx.context.messages);
                if (rule.tools) update.context = { ...ctx.context, messages: ctx.context.messages, tools: this.tools(rule.tools) };
                if (rule.messages) update.messages = rule.messages.map(asMessage);
                if (rule.thinkingLevel !== undefined) update.thinkingLevel = rule.thinkingLevel;
                if (rule.abort) this.abort();
                if (rule.steer) this.queueSteer(rule.steer);
                return Object.keys(update).length ? update : undefined;
            };
        }
        if (h.prepareRequest) {
            out.prepareRequest = async (ctx, signal) => {
                const n = this.hookCall("prepareRequest");
                this.record({ kind: "hook", hook: "prepareRequest", n, thinkingLevel: ctx.thinkingLevel, messages: ctx.context.messages.length, aborted: signal?.aborted === true });
                const rule = h.prepareRequest[String(n)];
                if (!rule) return undefined;
                if (rule.throw) throw new Error(rule.throw);
                const update = {};
                if (rule.thinkingLevel !== undefined) update.thinkingLevel = rule.thinkingLevel;
                if (rule.tools) update.context = { ...ctx.context, tools: this.tools(rule.tools) };
                if (rule.dropLast) update.context = { ...(update.context ?? ctx.context), messages: ctx.context.messages.slice(0, -rule.dropLast) };
                if (rule.dropLastInPlace) ctx.context.messages.splice(-rule.dropLastInPlace, rule.dropLastInPlace);
                if (rule.toolsInPlace) replaceInPlace(ctx.context.tools, this.tools(rule.toolsInPlace));
                if (rule.clearToolsInPlace) clearToolsInPlace(ctx.context.messages);
                if (rule.abort) this.abort();
                return Object.keys(update).length ? update : undefined;
            };
        }
        if (h.transformContext) {
            out.transformContext = async (messages, signal) => {
                const n = this.hookCall("transformContext");
                this.record({ kind: "hook", hook: "transformContext", n, roles: messages.map((m) => m.role), aborted: signal?.aborted === true });
                const rule = h.transformContext[String(n)] ?? h.transformContext["*"];
                if (!rule) return messages;
                if (rule.throw) throw new Error(rule.throw);
                let out = messages;
                if (rule.replaceFirstSystem) messages[0] = asMessage(rule.replaceFirstSystem);
                if (rule.appendInPlace !== undefined) messages.push(asMessage(rule.appendInPlace));
                if (rule.clearToolsInPlace) clearToolsInPlace(messages);
                if (rule.dropRolesInPlace) removeInPlace(messages, (m) => rule.dropRolesInPlace.includes(m.role));
                if (rule.editToolResultsInPlace !== undefined) {
                    for (const m of messages) if (m.role === "toolResult") replaceInPlace(m.content, textBlock(rule.editToolResultsInPlace));
                }
                if (rule.editToolResults !== undefined) {
                    out = out.map((m) => (m.role === "toolResult" ? { ...m, content: textBlock(rule.editToolResults) } : m));
                }
                if (rule.dropRoles) out = out.filter((m) => !rule.dropRoles.includes(m.role));
                if (rule.keepLast) out = [...out.filter((m) => m.role === "system").slice(0, 1), ...out.filter((m) => m.role !== "system").slice(-rule.keepLast)];
                if (rule.appendUser) out = [...out, asMessage(rule.appendUser)];
                if (rule.append !== undefined) out = [...out, asMessage(rule.append)];
                return out;
            };
        }
        const convert = h.convertToLlm;
        out.convertToLlm = async (messages) => {
            if (convert) {
                const n = this.hookCall("convertToLlm");
                this.record({ kind: "hook", hook: "convertToLlm", n, roles: messages.map((m) => m.role), aborted: this.signal?.aborted === true });
                const rule = convert[String(n)] ?? convert["*"] ?? {};
                if (rule.throw) throw new Error(rule.throw);
                if (rule.dropRolesInPlace) removeInPlace(messages, (m) => rule.dropRolesInPlace.includes(m.role));
                if (rule.mapRoles) {
                    messages = messages.map((m) => (rule.mapRoles.includes(m.role) ? { role: "user", content: textBlock(appText(m)), timestamp: m.timestamp } : m));
                }
                if (rule.dropRoles) messages = messages.filter((m) => !rule.dropRoles.includes(m.role));
            }
            return messages.filter((m) => ["system", "user", "assistant", "toolResult"].includes(m.role));
        };
        return out;
    }

    // ---- events
    observe(event) {
        const raw = { kind: "event", ...event };
        if (event.type === "message_update") {
            delete raw.message;
            raw.assistantMessageEvent = { ...event.assistantMessageEvent };
            if (!this.s.keepPartial) delete raw.assistantMessageEvent.partial;
        }
        this.record(raw);
        const pending = [];
        if (event.type === "tool_execution_start") this.started.add(event.toolCallId);
        if (event.type === "tool_execution_end") this.ended.add(event.toolCallId);
        for (const [index, action] of (this.s.actions ?? []).entries()) {
            if (this.actionsDone.has(index) || !matchesEvent(action.on, event)) continue;
            const key = `${index}`;
            const count = (this.counts.get(key) ?? 0) + 1;
            this.counts.set(key, count);
            if (count !== (action.nth ?? 1)) continue;
            this.actionsDone.add(index);
            this.record({ kind: "action", index });
            for (const step of action.do) pending.push(this.perform(step));
        }
        this.notify();
        return Promise.all(pending);
    }

    async perform(step) {
        if ("prompt" in step || "continue" in step) {
            let error = null;
            try {
                if ("prompt" in step) await this.agent.prompt(step.prompt);
                else await this.agent.continue();
            } catch (e) {
                error = e instanceof Error ? e.message : String(e);
            }
            this.record({ kind: "actionResult", error });
        }
        if ("steer" in step) this.queueSteer(step.steer);
        if ("followUp" in step) this.queueFollowUp(step.followUp);
        if ("abort" in step) this.abort(step.reason);
        if ("setTools" in step && this.agent) this.agent.state.tools = this.tools(step.setTools);
    }

    // ---- entries
    loopConfig() {
        const c = this.s.config ?? {};
        return {
            model: MODEL,
            reasoning: c.thinkingLevel && c.thinkingLevel !== "off" ? c.thinkingLevel : undefined,
            toolExecution: c.toolExecution ?? "parallel",
            ...(c.temperature !== undefined ? { temperature: c.temperature } : {}),
            getSteeringMessages: async () => this.drain(this.steering, c.steeringMode),
            getFollowUpMessages: async () => this.drain(this.followUps, c.followUpMode),
            ...this.hooks(),
        };
    }

    async runLoop() {
        const steps = this.s.steps ?? [{ prompt: "hi" }];
        const step = steps[0];
        const context = { messages: (this.s.messages ?? []).map(asMessage), tools: this.initialTools() };
        const initial = createInitialSystemMessage(this.s.systemPrompt, context.tools.map(toToolDeclaration));
        if (initial && context.messages[0]?.role !== "system") context.messages.unshift(initial);
        for (const q of this.s.queued?.steering ?? []) this.steering.push(asMessage(q));
        for (const q of this.s.queued?.followUp ?? []) this.followUps.push(asMessage(q));
        this.controller = new AbortController();
        if (this.s.abortBeforeRun) this.controller.abort();
        const emit = async (event) => await this.observe(event);
        const config = this.loopConfig();
        const stream = this.entry.startsWith("agent_loop");
        let result;
        let error = null;
        try {
            if (step.continue) {
                if (stream) result = await drainStream(agentLoopContinue(context, config, this.controller.signal, this.streamFn()), (e) => this.observe(e));
                else result = await runAgentLoopContinue(context, config, emit, this.controller.signal, this.streamFn());
            } else {
                const prompts = promptMessages(step);
                if (stream) result = await drainStream(agentLoop(prompts, context, config, this.controller.signal, this.streamFn()), (e) => this.observe(e));
                else result = await runAgentLoop(prompts, context, config, emit, this.controller.signal, this.streamFn());
            }
        } catch (e) {
            error = e instanceof Error ? e.message : String(e);
        }
        return {
            log: this.log,
            result: result ?? null,
            error,
            callerMessages: context.messages,
            queues: { steering: this.steering, followUp: this.followUps },
        };
    }

    async runAgent() {
        const c = this.s.config ?? {};
        const options = {
            initialState: {
                systemPrompt: this.s.systemPrompt ?? "",
                model: MODEL,
                tools: this.initialTools(),
                messages: (this.s.messages ?? []).map(asMessage),
                thinkingLevel: c.thinkingLevel ?? "off",
            },
            streamFn: this.streamFn(),
            steeringMode: c.steeringMode ?? "one-at-a-time",
            followUpMode: c.followUpMode ?? "one-at-a-time",
            toolExecution: c.toolExecution ?? "parallel",
        };
        const hooks = this.hooks();
        for (const name of ["beforeToolCall", "afterToolCall", "finishTurn", "prepareRequest", "transformContext", "convertToLlm"]) {
            if (hooks[name]) options[name] = hooks[name];
        }
        if (this.s.defaultConvert) delete options.convertToLlm; // the Agent's own defaultConvertToLlm
        if (hooks.prepareNextTurn) options.prepareNextTurnWithContext = (ctx, signal) => hooks.prepareNextTurn(ctx);
        const agent = new Agent(options);
        this.agent = agent;
        agent.subscribe(async (event) => {
            await this.observe(event);
            const fail = (this.s.listenerThrows ?? []).find((rule) => !rule.fired && matchesEvent(rule.on, event));
            if (fail) {
                fail.fired = true;
                throw new Error(fail.message ?? "listener failed");
            }
        });
        for (const q of this.s.queued?.steering ?? []) agent.steer(asMessage(q));
        for (const q of this.s.queued?.followUp ?? []) agent.followUp(asMessage(q));
        const outcomes = [];
        for (const step of this.s.steps ?? [{ prompt: "hi" }]) {
            let error = null;
            try {
                if ("prompt" in step) {
                    const input = typeof step.prompt === "string" ? step.prompt : Array.isArray(step.prompt) ? step.prompt.map(asMessage) : asMessage(step.prompt);
                    await agent.prompt(input, step.images);
                } else if (step.continue) await agent.continue();
                else if ("steer" in step) agent.steer(asMessage(step.steer));
                else if ("followUp" in step) agent.followUp(asMessage(step.followUp));
                else if ("setTools" in step) agent.state.tools = this.tools(step.setTools);
                else if ("setThinkingLevel" in step) agent.state.thinkingLevel = step.setThinkingLevel;
                else if ("setMessages" in step) agent.state.messages = step.setMessages.map(asMessage);
                else if ("dropLastMessages" in step) agent.state.messages = agent.state.messages.slice(0, -step.dropLastMessages);
                else if ("reset" in step) agent.reset();
                else if ("clearQueues" in step) agent.clearAllQueues();
            } catch (e) {
                error = e instanceof Error ? e.message : String(e);
            }
            this.record({ kind: "step", error });
            outcomes.push(error);
        }
        return {
            log: this.log,
            transcript: agent.state.messages,
            state: {
                systemPrompt: agent.state.systemPrompt,
                errorMessage: agent.state.errorMessage ?? null,
                isStreaming: agent.state.isStreaming,
                pendingToolCalls: agent.state.pendingToolCalls.size,
                hasQueuedMessages: agent.hasQueuedMessages(),
                peekQueuedMessages: agent.peekQueuedMessages(),
            },
        };
    }
}

let lastRejection = null;
process.on("unhandledRejection", (reason) => {
    lastRejection = reason instanceof Error ? reason.message : String(reason);
});

/** Read an agentLoop stream to its end; a stream that never ends is reported, not awaited forever. */
async function drainStream(stream, observe) {
    lastRejection = null;
    const read = (async () => {
        for await (const event of stream) observe(event);
        return await stream.result();
    })();
    let timer;
    const hang = new Promise((_, reject) => {
        timer = setTimeout(() => reject(new Error(`HANG: the event stream did not end (unhandled rejection: ${lastRejection})`)), HANG_MS);
    });
    try {
        return await Promise.race([read, hang]);
    } finally {
        clearTimeout(timer);
    }
}

function promptMessages(step) {
    if (typeof step.prompt === "string") return [asMessage(step.prompt)];
    if (Array.isArray(step.prompt)) return step.prompt.map(asMessage);
    return [asMessage(step.prompt)];
}

function matchesEvent(on, event) {
    if (on.type && on.type !== event.type) return false;
    if (on.toolCallId && on.toolCallId !== event.toolCallId) return false;
    if (on.role && on.role !== event.message?.role) return false;
    if (on.event && on.event !== event.assistantMessageEvent?.type) return false;
    if (on.stopReason && on.stopReason !== event.message?.stopReason) return false;
    return true;
}

export function entriesOf(scenario) {
    return scenario.entries ?? ["agent", "run_loop"];
}

async function runScenario(scenario, entry) {
    const harness = new Harness(scenario, entry);
    const output = entry === "agent" ? await harness.runAgent() : await harness.runLoop();
    return clone(output);
}

async function main() {
    const args = process.argv.slice(2);
    let only;
    const files = [];
    for (let i = 0; i < args.length; i++) {
        if (args[i] === "--entry") only = args[++i];
        else files.push(args[i]);
    }
    const out = {};
    for (const file of files) {
        const scenario = JSON.parse(readFileSync(file, "utf8"));
        const name = scenario.name ?? basename(file, ".json");
        out[name] = {};
        for (const entry of entriesOf(scenario)) {
            if (only && entry !== only) continue;
            try {
                out[name][entry] = await runScenario(scenario, entry);
            } catch (e) {
                out[name][entry] = { driverError: e instanceof Error ? `${e.message}\n${e.stack}` : String(e) };
            }
        }
    }
    process.stdout.write(JSON.stringify(out));
}

await main();
