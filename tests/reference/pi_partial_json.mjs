// Reads a JSON list of strings on stdin; prints pi-ai's parseStreamingJson of each (null when
// it throws, which it should not).
import { parseStreamingJson } from "@earendil-works/pi-ai";

let input = "";
for await (const chunk of process.stdin) input += chunk;
const out = JSON.parse(input).map((text) => {
    try {
        return { value: parseStreamingJson(text) };
    } catch (e) {
        return { error: e instanceof Error ? e.message : String(e) };
    }
});
process.stdout.write(JSON.stringify(out));
