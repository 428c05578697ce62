// The pi side of the wire differentials (test_wire_*.py): streams each job through pi-ai
// 1.6.1's own adapter of the job's API (`streamSimple` of `@earendil-works/pi-ai/api/<api>`)
// against the local wire server (wire_recorder.py), and prints by job key the assistant events
// (without `partial`) and the final message, or {"driverError": "..."}.
// usage: node pi_stream_driver.mjs <jobs.json>
//   jobs.json: {"jobs": [{"key", "model", "context", "options", "abortAtText"}]}
import { readFileSync } from "node:fs";

const spec = JSON.parse(readFileSync(process.argv[2], "utf8"));
const modules = {};
async function adapter(api) {
    modules[api] ??= await import(`@earendil-works/pi-ai/api/${api}`);
    return modules[api];
}

async function run({ model, context, options, abortAtText }) {
    const { streamSimple } = await adapter(model.api);
    const controller = new AbortController();
    const stream = streamSimple(model, context, {
        maxRetries: 0, maxRetryDelayMs: 1, ...options, signal: controller.signal,
    });
    const events = [];
    for await (const event of stream) {
        const { partial, ...rest } = event;
        events.push(JSON.parse(JSON.stringify(rest)));
        if (abortAtText && event.type === "text_delta") controller.abort();
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
