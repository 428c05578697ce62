// Reads a JSON list of strings on stdin; prints pi-ai's parseStreamingJson of each (an error
// when it throws, which it should not). NaN and the infinities, which JSON cannot write, are
// written as {"$nonfinite": "NaN" | "Infinity" | "-Infinity"}.
import { parseStreamingJson } from "@earendil-works/pi-ai";

let input = "";
for await (const chunk of process.stdin) input += chunk;
const nonFinite = (key, value) =>
    typeof value === "number" && !Number.isFinite(value) ? { $nonfinite: String(value) } : value;
const out = JSON.parse(input).map((text) => {
    try {
        return { value: parseStreamingJson(text) };
    } catch (e) {
        return { error: e instanceof Error ? e.message : String(e) };
    }
});
process.stdout.write(JSON.stringify(out, nonFinite));
