// Streams each job through pi-ai 1.4.0's own adapter (`streamSimple` of the job's API) with the
// model's baseUrl at the local replay server, and prints what it produced: the assistant events
// (without `partial`) and the final message, by job key.
// A job with "proxy" goes through pi-agent-core's `streamProxy` to that proxy server instead.
// usage: node pi_provider_driver.mjs <jobs.json>
//   jobs.json: {"apiKey": "...", "context": {...},
//               "jobs": [{"key", "model", "proxy": {"proxyUrl", "authToken"} (optional)}]}
import { readFileSync } from "node:fs";
import { streamProxy } from "@earendil-works/pi-agent-core";

const spec = JSON.parse(readFileSync(process.argv[2], "utf8"));
const modules = {};
async function adapter(api) {
    modules[api] ??= await import(`@earendil-works/pi-ai/api/${api}`);
    return modules[api];
}

async function run({ model, proxy }) {
    const { streamSimple } = await adapter(model.api);
    const stream = proxy
        ? streamProxy(model, spec.context, proxy)
        : streamSimple(model, spec.context, { apiKey: spec.apiKey, maxRetries: 0, maxRetryDelayMs: 1 });
    const events = [];
    for await (const event of stream) {
        const { partial, ...rest } = event;
        events.push(JSON.parse(JSON.stringify(rest)));
    }
    return { events, result: JSON.parse(JSON.stringify(await stream.result())) };
}

const out = {};
const queue = [...spec.jobs];
async function worker() {
    for (let job = queue.shift(); job !== undefined; job = queue.shift()) {
        try {
            out[job.key] = await run(job);
        } catch (error) {
            out[job.key] = { driverError: String(error?.stack ?? error) };
        }
    }
}
await Promise.all(Array.from({ length: 8 }, worker));
process.stdout.write(JSON.stringify(out));
