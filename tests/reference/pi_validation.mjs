// Reads a JSON list of {schema, arguments} on stdin; prints for each what pi-ai's
// validateToolArguments returns ({value}) or the text of the error it throws ({error}).
import { validateToolArguments } from "@earendil-works/pi-ai";

let input = "";
for await (const chunk of process.stdin) input += chunk;
const out = JSON.parse(input).map(({ schema, arguments: args }) => {
    const tool = { name: "t", description: "", parameters: schema };
    try {
        return { value: validateToolArguments(tool, { type: "toolCall", id: "c", name: "t", arguments: args }) };
    } catch (e) {
        return { error: e instanceof Error ? e.message : String(e) };
    }
});
process.stdout.write(JSON.stringify(out));
