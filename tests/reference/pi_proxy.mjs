// Streams each case through pi's streamProxy against a local proxy server and prints what the
// client produced: the assistant events (without partial) and the final message.
// usage: node pi_proxy.mjs <proxyUrl> '<json: {model, context, cases: [{name, abortOn}]}>'
import { streamProxy } from "@earendil-works/pi-agent-core";

const [proxyUrl, spec] = process.argv.slice(2);
const { model, context, cases } = JSON.parse(spec);
const out = {};
for (const { name, abortOn } of cases) {
    const controller = new AbortController();
    const stream = streamProxy(model, context, {
        proxyUrl, authToken: `pi:${name}`, signal: controller.signal, temperature: 0.5, maxTokens: 64, reasoning: "low", sessionId: "s-1",
    });
    const events = [];
    for await (const event of stream) {
        const { partial, ...rest } = event;
        events.push(JSON.parse(JSON.stringify(rest)));
        if (abortOn && event.type === abortOn) controller.abort();
    }
    out[name] = { events, result: await stream.result() };
}
process.stdout.write(JSON.stringify(out));
