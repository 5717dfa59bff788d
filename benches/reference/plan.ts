// What `cargo bench --bench reference` runs under Bun: the reference (oh-my-pi) doing the job
// `compactd plan` does on one session file, in one process, `reps` times: open the file with
// its SessionManager, build the context at the leaf, and prepare a compaction with its
// default settings (the cut point and what to summarise; no summary is written).
//
//   bun plan.ts FILE REPS
//
// Prints one JSON line: the milliseconds of each run (the first with a cold JIT), and what
// the last run found, so the bench can check both programs cut at the same entry.
import {
	DEFAULT_COMPACTION_SETTINGS,
	prepareCompaction,
	SessionManager,
} from "@oh-my-pi/pi-coding-agent";

const [file, repsArg] = process.argv.slice(2);
if (!file) {
	console.error("usage: bun plan.ts FILE [REPS]");
	process.exit(2);
}
const reps = Math.max(1, Number(repsArg ?? "1"));

const runsMs: number[] = [];
let found: Record<string, unknown> = {};
for (let i = 0; i < reps; i++) {
	const start = performance.now();
	const manager = await SessionManager.open(file);
	const context = manager.buildSessionContext();
	const preparation = prepareCompaction(manager.getBranch(), DEFAULT_COMPACTION_SETTINGS);
	runsMs.push(performance.now() - start);
	found = {
		entries: manager.getEntries().length,
		contextMessages: context.messages.length,
		firstKeptEntryId: preparation?.firstKeptEntryId ?? null,
		messagesToSummarize: preparation?.messagesToSummarize.length ?? null,
	};
}
console.log(JSON.stringify({ runsMs, ...found }));
