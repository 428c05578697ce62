// pi-coding-agent 1.6.0's compaction, the reference for piagent.compaction (issue 47).
// Reads JSON cases from stdin, [{log: [agent-core message JSON...], keep: N}], and prints
// for each what pi makes of it: every message's estimateTokens, estimateContextTokens of
// the messages without summaries, the projection (buildSessionProjection) and
// prepareCompaction, and convertToLlm of each summary. A compactionSummary message of the log becomes pi's "compaction"
// session entry, its firstKept index the id of the entry kept first.
import { readFileSync } from "fs";
// by path: the package exports only its index, and the index does not export these
import {
  estimateContextTokens,
  estimateTokens,
  prepareCompaction,
} from "./node_modules/@earendil-works/pi-coding-agent/dist/core/compaction/compaction.js";
import { convertToLlm } from "./node_modules/@earendil-works/pi-coding-agent/dist/core/messages.js";
import { buildSessionProjection } from "./node_modules/@earendil-works/pi-coding-agent/dist/core/session-manager.js";

const cases = JSON.parse(readFileSync(0, "utf8"));
const out = [];
for (const c of cases) {
  const entries = [];
  let parent = null;
  c.log.forEach((m, i) => {
    const id = `e${i}`;
    const timestamp = new Date(m.timestamp).toISOString();
    if (m.role === "compactionSummary") {
      entries.push({ type: "compaction", id, parentId: parent, timestamp, summary: m.summary,
        firstKeptEntryId: m.firstKept === undefined ? id : `e${m.firstKept}`,
        tokensBefore: m.tokensBefore, details: m.details });
    } else {
      entries.push({ type: "message", id, parentId: parent, timestamp, message: m });
    }
    parent = id;
  });
  const name = (m) => (m.role === "compactionSummary" ? `summary:${m.summary}` : m.timestamp);
  const prep = prepareCompaction(entries, { enabled: true, reserveTokens: 16384, keepRecentTokens: c.keep });
  out.push({
    estimates: c.log.map((m) => (m.role === "compactionSummary" ? null : estimateTokens(m))),
    contextTokens: estimateContextTokens(c.log.filter((m) => m.role !== "compactionSummary")).tokens,
    projected: buildSessionProjection(entries).messages.map(name),
    // what the model reads of each summary (pi's prefix and suffix around it)
    framed: convertToLlm(c.log.filter((m) => m.role === "compactionSummary")),
    prep: prep ? {
      firstKept: Number(prep.firstKeptEntryId.slice(1)),
      toSummarize: prep.messagesToSummarize.map(name),
      turnPrefix: prep.turnPrefixMessages.map(name),
      isSplitTurn: prep.isSplitTurn,
      tokensBefore: prep.tokensBefore,
      previousSummary: prep.previousSummary ?? null,
      read: [...prep.fileOps.read].sort(),
      modified: [...new Set([...prep.fileOps.edited, ...prep.fileOps.written])].sort(),
    } : null,
  });
}
process.stdout.write(JSON.stringify(out));
