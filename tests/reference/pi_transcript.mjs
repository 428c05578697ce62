// Prints transcripts written by pi (1.4.0): a real Agent run whose stream function uses
// pi-ai's AssistantMessageEventStream (so pi times the response), and one message of every
// kind and field pi-ai 1.4.0 declares. Output: {"run": [messages], "cases": {name: message}}.

import { Agent } from "@earendil-works/pi-agent-core";
import { createAssistantMessageEventStream } from "@earendil-works/pi-ai";

const usage = (extra = {}) => ({
    input: 120, output: 30, cacheRead: 10, cacheWrite: 5, totalTokens: 165,
    cost: { input: 0.00036, output: 0.00045, cacheRead: 0.000003, cacheWrite: 0.00001875, total: 0.00082175 },
    ...extra,
});
const model = { id: "m-1", name: "M", api: "openai-responses", provider: "openai", baseUrl: "https://x.invalid",
    reasoning: true, input: ["text", "image"], cost: { input: 3, output: 15, cacheRead: 0.3, cacheWrite: 3.75 },
    contextWindow: 1000, maxTokens: 100 };
const PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==";

async function realRun() {
    const replies = [
        { role: "assistant", content: [
            { type: "thinking", thinking: "Need the file.", thinkingSignature: "sig-1" },
            { type: "toolCall", id: "call_1", name: "read", arguments: { path: "a.txt" } }],
          api: model.api, provider: model.provider, model: model.id, usage: usage(), stopReason: "toolUse" },
        { role: "assistant", content: [{ type: "text", text: "It says hi." }],
          api: model.api, provider: model.provider, model: model.id, usage: usage(), stopReason: "stop" },
    ];
    const streamFn = () => {
        const stream = createAssistantMessageEventStream();
        const message = { ...replies.shift(), timestamp: Date.now() };
        queueMicrotask(() => {
            stream.push({ type: "start", partial: { ...message, content: [] } });
            stream.push({ type: "done", reason: message.stopReason, message });
        });
        return stream;
    };
    const read = {
        name: "read", label: "Read", description: "Read a file",
        parameters: { type: "object", properties: { path: { type: "string" } }, required: ["path"] },
        execute: async (id, params) => ({ content: [{ type: "text", text: "hi" }, { type: "image", data: PNG, mimeType: "image/png" }], details: { bytes: 2 } }),
    };
    const agent = new Agent({ initialState: { systemPrompt: "You read files.", model, tools: [read], thinkingLevel: "high" }, streamFn });
    await agent.prompt("Read a.txt", [{ type: "image", data: PNG, mimeType: "image/png" }]);
    return agent.state.messages;
}

const decl = { name: "read", description: "Read a file", parameters: { type: "object", properties: { path: { type: "string" } }, required: ["path"] } };
const cases = {
    system_prompt: { role: "system", content: "You are terse.", timestamp: 0 },
    system_sections_and_tool_changes: { role: "system", content: "", sections: { style: "terse", old: null },
        toolsAdded: [decl], toolsRemoved: [{ name: "write" }], timestamp: 1700000000001 },
    system_text_blocks: { role: "system", content: [{ type: "text", text: "Part one." }, { type: "text", text: "Part two." }], timestamp: 1700000000002 },
    system_constrained_sampling: { role: "system", content: "", toolsAdded: [{ ...decl, constrainedSampling: false }], timestamp: 1700000000003 },
    user_string: { role: "user", content: "Hello", timestamp: 1700000000004 },
    user_text_and_image: { role: "user", content: [{ type: "text", text: "Look" }, { type: "image", data: PNG, mimeType: "image/png" }], timestamp: 1700000000005 },
    assistant_every_block: { role: "assistant", content: [
        { type: "thinking", thinking: "Hmm.", thinkingSignature: "sig-t" },
        { type: "thinking", thinking: "", thinkingSignature: "opaque", redacted: true },
        { type: "text", text: "Answer", textSignature: "sig-x" },
        { type: "toolCall", id: "call_9", name: "read", arguments: { path: "a" }, thoughtSignature: "sig-c" }],
        api: "anthropic-messages", provider: "anthropic", model: "claude-x", usage: usage(), stopReason: "toolUse",
        thinkingLevel: "high", timestamp: 1700000000006 },
    assistant_pi_1_4_fields: { role: "assistant", content: [{ type: "text", text: "ok" }], api: "openai-responses",
        provider: "openai", model: "gpt-x", responseModel: "gpt-x-2026-01-01", responseId: "resp_123",
        providerThinkingLevel: "medium", thinkingLevel: "medium",
        diagnostics: [{ type: "retry", timestamp: 1700000000007, details: { attempt: 1 } }],
        usage: usage(), stopReason: "stop", rawStopReason: "end_turn", endTurn: true,
        timestamp: 1700000000007, durationMs: 1234 },
    assistant_usage_extras: { role: "assistant", content: [{ type: "text", text: "ok" }], api: "anthropic-messages",
        provider: "anthropic", model: "claude-x", usage: usage({ cacheWrite1h: 7, reasoning: 11 }), stopReason: "stop",
        timestamp: 1700000000008 },
    assistant_tool_call_extras: { role: "assistant", content: [
        { type: "toolCall", id: "call_n", name: "read", arguments: {}, namespace: "fs", argumentsError: "Unexpected end of JSON input" }],
        api: "openai-responses", provider: "openai", model: "gpt-x", usage: usage(), stopReason: "toolUse", timestamp: 1700000000009 },
    assistant_error: { role: "assistant", content: [], api: "openai-completions", provider: "openai", model: "gpt-x",
        usage: usage(), stopReason: "error", errorMessage: "429 Too Many Requests", timestamp: 1700000000010 },
    assistant_aborted: { role: "assistant", content: [{ type: "text", text: "Partial" }], api: "openai-completions",
        provider: "openai", model: "gpt-x", usage: usage(), stopReason: "aborted", errorMessage: "Request was aborted", timestamp: 1700000000011 },
    assistant_deferred: { role: "assistant", content: [], api: "openai-responses", provider: "openai", model: "gpt-x",
        usage: usage(), stopReason: "deferred", deferred: { provider: "openai", modelId: "gpt-x", api: "openai-responses", id: "batch_1", pollAfterMs: 1000 },
        timestamp: 1700000000012 },
    tool_result_full: { role: "toolResult", toolCallId: "call_9", toolName: "read",
        content: [{ type: "text", text: "hi" }, { type: "image", data: PNG, mimeType: "image/png" }],
        details: { bytes: 2, nested: { a: [1, 2] } }, usage: usage(), isError: false, timestamp: 1700000000013, durationMs: 12 },
    tool_result_error: { role: "toolResult", toolCallId: "call_9", toolName: "read", content: [{ type: "text", text: "ENOENT" }],
        details: {}, isError: true, timestamp: 1700000000014, durationMs: 1 },
    tool_result_nested_calls: { role: "toolResult", toolCallId: "call_c", toolName: "codemode", content: [{ type: "text", text: "done" }],
        nestedCalls: { calls: [{ id: "n1", name: "read", arguments: { path: "a" }, status: "ok", durationMs: 3 },
                               { id: "n2", name: "write", argumentsBytes: 9000, status: "error", error: "denied" }], complete: false },
        isError: false, timestamp: 1700000000015 },
    tool_result_no_details_legacy: { role: "toolResult", toolCallId: "call_l", toolName: "read", content: [{ type: "text", text: "old" }],
        isError: false, timestamp: 1700000000016 },
    tool_result_explicit_null_details: { role: "toolResult", toolCallId: "call_z", toolName: "read", content: [],
        details: null, isError: false, timestamp: 1700000000017 },
    assistant_explicit_false: { role: "assistant", content: [{ type: "thinking", thinking: "Visible.", redacted: false }],
        api: "x", provider: "x", model: "x", usage: usage(), stopReason: "stop", endTurn: false, timestamp: 1700000000019 },
    assistant_future_field: { role: "assistant", content: [{ type: "text", text: "ok" }], api: "x", provider: "x", model: "x",
        usage: usage(), stopReason: "stop", timestamp: 1700000000018, someFieldAddedByALaterPi: { kept: true } },
};

const run = await realRun();
process.stdout.write(JSON.stringify({ run, cases }));
