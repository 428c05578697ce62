// Records pi-ai 1.6.1's partial tool arguments (ToolCallArgumentsStream.append) for the
// cases on stdin ([[piece, ...], ...]); writes [[partial JSON after each piece, ...], ...].
// Run by tests/stream/record_streaming_json.py with the path of pi-ai 1.6.1's dist.
const dist = process.argv[2];
const { ToolCallArgumentsStream } = await import(`${dist}/utils/streaming-json.js`);
let input = "";
process.stdin.on("data", (d) => (input += d));
process.stdin.on("end", () => {
  const out = JSON.parse(input).map((pieces) => {
    const stream = new ToolCallArgumentsStream();
    return pieces.map((piece) => JSON.stringify(stream.append(piece)));
  });
  process.stdout.write(JSON.stringify(out));
});
