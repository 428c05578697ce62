// Streams each job through pi-ai 1.6.1's own adapter of one API (`streamSimple` of
// `@earendil-works/pi-ai/api/<api>`) against the local wire server, and prints, by job key,
// the assistant events (without `partial`) and the final message.
// usage: node --preserve-symlinks pi16/pi_wire_driver.mjs <jobs.json>
//   jobs.json: {"jobs": [{"key", "model", "context", "options", "abortOn" (an event type:
//               abort when it first arrives)}]}
import { readFileSync } from "node:fs";

const spec = JSON.parse(readFileSync(process.argv[2], "utf8"));
const modules = {};
async function adapter(api) {
    modules[api] ??= await import(`@earendil-works/pi-ai/api/${api}`);
    return modules[api];
}

async function run({ model, context, options, abortOn }) {
    const { streamSimple } = await adapter(model.api);
    const controller = new AbortController();
    const stream = streamSimple(model, context, { ...options, signal: controller.signal });
    const events = [];
    for await (const event of stream) {
        const { partial, ...rest } = event;
        events.push(JSON.parse(JSON.stringify(rest)));
        if (abortOn && event.type === abortOn) controller.abort();
    }
    return { events, result: JSON.parse(JSON.stringify(await stream.result())) };
}

const out = {};
for (const job of spec.jobs) {
    try {
        out[job.key] = await run(job);
    } catch (error) {
        out[job.key] = { driverError: String(error?.stack ?? error) };
    }
}
process.stdout.write(JSON.stringify(out));
