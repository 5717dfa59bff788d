//! Facts read from messages the same way by every part that keeps them: whether a tool call
//! really failed, the line that says why, and which of the user's sentences are standing
//! instructions. The extractive summarizer writes these facts and the retention guard checks
//! that a summary kept them, so both read them here.

use crate::session::{ExecutionMessage, ToolCall};

/// How many of the latest errors and constraints a summary must keep (the retention guard
/// checks for that many of each).
pub const LATEST_KEPT: usize = 5;

/// What a tool call or command came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Succeeded,
    /// A search that found nothing (`grep` exiting 1 with no output): an answer, not a failure.
    NoMatch,
    /// Stopped by the user or the agent before it finished: neither a result nor a failure.
    Aborted,
    Failed,
}

/// The outcome of a tool result: its `text`, whether the tool flagged it an error, and the
/// command it ran (from the call's arguments), if any.
pub fn tool_outcome(command: Option<&str>, tool_name: &str, text: &str, is_error: bool) -> Outcome {
    if last_meaningful_line(text).is_some_and(is_abort_notice) || is_abort_notice(text.trim()) {
        return Outcome::Aborted;
    }
    if !is_error {
        return Outcome::Succeeded;
    }
    let silent = last_meaningful_line(text).is_none();
    let exit = exit_code(text);
    let searches = command.map_or_else(|| is_search_tool(tool_name), is_search_command);
    if searches && ((silent && exit.is_none_or(|c| c == 1)) || says_no_match(text)) {
        return Outcome::NoMatch;
    }
    Outcome::Failed
}

/// The outcome of a command the user ran (`bashExecution`, `pythonExecution`).
pub fn execution_outcome(exec: &ExecutionMessage) -> Outcome {
    if exec.cancelled {
        return Outcome::Aborted;
    }
    match exec.exit_code {
        Some(0) | None => Outcome::Succeeded,
        Some(1) if exec.output.trim().is_empty() && is_search_command(exec.source()) => {
            Outcome::NoMatch
        }
        Some(_) => Outcome::Failed,
    }
}

/// The command a tool call runs, from its arguments (`command` or `cmd`).
pub fn call_command(call: &ToolCall) -> Option<&str> {
    ["command", "cmd"]
        .iter()
        .find_map(|k| call.arguments.get(k).and_then(|v| v.as_str()))
}

/// The line of a failed output that says what went wrong: the first line that reads as an
/// error, else the last line that is not noise (a debugger banner, an npm script echo, the
/// exit-code wrapper), else the wrapper itself. `None` for an empty output.
pub fn error_line(text: &str) -> Option<String> {
    let lines = || text.lines().map(str::trim).filter(|l| !l.is_empty());
    let found = lines()
        .filter(|l| !is_noise(l))
        .find(|l| looks_like_error(l))
        .or_else(|| lines().rfind(|l| !is_noise(l) && !is_wrapper(l)))
        .or_else(|| lines().find(|l| is_wrapper(l)))?;
    Some(found.to_owned())
}

/// The user's standing instructions in `text`: sentences that lay down a rule with "always",
/// "never", "must", "make sure", or an imperative "don't" / "do not" / "avoid" / "prefer".
/// Questions, hedged or narrating sentences ("i think it must be…", "i don't understand")
/// and pasted material (logs, JSON, code) are not instructions.
pub fn instructions(text: &str) -> Vec<String> {
    prose_sentences(text)
        .into_iter()
        .filter(|s| is_instruction(s))
        .map(str::to_owned)
        .collect()
}

/// Sentences of the prose in `text`, each with its closing punctuation: fenced code and lines
/// that look pasted (logs, prompts, JSON, tables) are skipped; lines are split at `.`, `!` or
/// `?` followed by a space.
pub fn prose_sentences(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    for line in prose_lines(text) {
        let bytes = line.as_bytes();
        let mut start = 0;
        for (i, b) in bytes.iter().enumerate() {
            if matches!(b, b'.' | b'!' | b'?') && bytes.get(i + 1).is_none_or(|n| *n == b' ') {
                out.push(&line[start..=i]);
                start = i + 1;
            }
        }
        out.push(&line[start..]);
    }
    out.into_iter()
        .map(|s| s.trim().trim_start_matches(['-', '*', '>', ' ']).trim())
        .filter(|s| s.chars().filter(|c| c.is_alphanumeric()).count() > 2)
        .collect()
}

/// The lines of `text` outside fenced code blocks that are not pasted material. A paste runs
/// from a line that looks pasted to the next blank line (a wrapped log line or error stays
/// part of it).
pub fn prose_lines(text: &str) -> impl Iterator<Item = &str> {
    let mut in_fence = false;
    let mut in_paste = false;
    text.lines().filter(move |line| {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
            return false;
        }
        if line.trim().is_empty() {
            in_paste = false;
            return false;
        }
        let pasted = looks_pasted(line);
        // Headings, table rows and quotes stand alone; logs, prompts and JSON run on.
        in_paste |= pasted && !line.trim_start().starts_with(['#', '|', '>', '<']);
        !in_fence && !in_paste && !pasted
    })
}

/// Whether `line` was pasted rather than written: a shell prompt or log line, a stack frame,
/// JSON, markup, a table row.
pub fn looks_pasted(line: &str) -> bool {
    let t = line.trim();
    const STARTS: &[&str] = &[
        "{", "[", "<", "➜", "$ ", "> ", "at ", "|", "#", "```", "+ ", "─", "Error:", "error:", "⠋",
        "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏",
    ];
    STARTS.iter().any(|s| t.starts_with(s)) || t.matches("\":").count() >= 2
}

fn is_instruction(sentence: &str) -> bool {
    if sentence.ends_with('?') {
        return false;
    }
    let lower = sentence.to_lowercase().replace('’', "'");
    let body = strip_fillers(&lower);
    const NARRATION: &[&str] = &[
        "i think",
        "i guess",
        "i suppose",
        "i feel",
        "i believe",
        "i wonder",
        "i'm not sure",
        "not sure",
        "maybe",
        "perhaps",
        "let me",
        "let's see",
        "i don't",
        "i dont",
        "i do not",
        "it seems",
        "looks like",
    ];
    if NARRATION.iter().any(|n| starts_with_words(body, n)) {
        return false;
    }
    let words: Vec<&str> = body
        .split(|c: char| !(c.is_alphanumeric() || c == '\''))
        .filter(|w| !w.is_empty())
        .collect();
    let has = |w: &str| words.contains(&w);
    if has("always") || has("never") || has("must") || has("mustn't") || body.contains("make sure")
    {
        return true;
    }
    // "don't", "do not", "avoid", "prefer" as commands: at the start of the sentence or of a
    // clause, not after a subject ("it doesn't", "we don't stream").
    clause_starts(body).any(|clause| {
        [
            "don't",
            "dont",
            "do not",
            "please don't",
            "avoid",
            "prefer",
            "stop",
        ]
        .iter()
        .any(|cue| starts_with_words(clause, cue))
    })
}

/// `text` without the leading "ok, ", "yeah ", "alright, "… a user puts before the point.
pub fn strip_fillers(text: &str) -> &str {
    const FILLERS: &[&str] = &[
        "ok",
        "okay",
        "yes",
        "yeah",
        "yep",
        "no",
        "nope",
        "alright",
        "also",
        "and",
        "but",
        "so",
        "please",
        "hm",
        "hmm",
        "hmmm",
        "well",
        "btw",
        "oh",
        "wait",
        "sure",
        "great",
        "cool",
        "nice",
        "right",
        "then",
        "now",
        "dude",
        "my dude",
        "wow",
        "omfg",
        "omg",
        "wtf",
        "jesus",
        "lol",
        "fucking hell",
        "sooo",
        "soo",
        "like",
        "continue",
    ];
    let mut rest = text.trim_start();
    loop {
        let before = rest;
        for filler in FILLERS {
            if starts_with_words(rest, filler) {
                rest = rest[filler.len()..].trim_start_matches([',', '.', '!', ' ']);
                break;
            }
        }
        if rest.len() == before.len() {
            return rest;
        }
    }
}

/// The starts of `text`'s clauses: the text itself and what follows each `,` `;` `:` ` - `
/// ` and ` ` but `.
fn clause_starts(text: &str) -> impl Iterator<Item = &str> {
    let mut starts = vec![text];
    for sep in [", ", "; ", ": ", " - ", " — ", " and ", " but ", " so "] {
        starts.extend(text.match_indices(sep).map(|(i, _)| &text[i + sep.len()..]));
    }
    starts.into_iter().map(str::trim_start)
}

/// Whether `text` starts with the words `prefix` (not a longer word: "no" is not "nothing").
pub fn starts_with_words(text: &str, prefix: &str) -> bool {
    text.starts_with(prefix)
        && !text[prefix.len()..]
            .chars()
            .next()
            .is_some_and(|c| c.is_alphanumeric() || c == '\'')
}

const ERROR_CUES: &[&str] = &[
    "error:",
    "error[",
    "error ts",
    "] error",
    "panicked",
    "traceback",
    "exception",
    "fatal:",
    "failed",
    "failure",
    "cannot find",
    "could not find",
    "not found",
    "no such file",
    "permission denied",
    "undefined reference",
    "segmentation fault",
    "assertionerror",
    "not ok ",
    "✖",
    "✗",
];

fn looks_like_error(line: &str) -> bool {
    if line.len() > 2_000 {
        return false;
    }
    let lower = line.to_lowercase();
    // Test summaries say "0 failed" on success.
    if lower.contains("0 failed") || lower.contains("failed: 0") || lower.contains("# fail 0") {
        return false;
    }
    lower.starts_with("error") || ERROR_CUES.iter().any(|c| lower.contains(c))
}

/// Lines tools print around every run, which say nothing about this one.
fn is_noise(line: &str) -> bool {
    const NOISE: &[&str] = &[
        "Debugger attached.",
        "Waiting for the debugger to disconnect...",
        "(no output)",
    ];
    NOISE.contains(&line) || line.starts_with("> ") || line.starts_with("Error in the js-debug")
}

/// The agent's own note under a failed command: "Command exited with code N".
fn is_wrapper(line: &str) -> bool {
    line.starts_with("Command exited with code ")
}

fn exit_code(text: &str) -> Option<i64> {
    text.lines()
        .rev()
        .find_map(|l| l.trim().strip_prefix("Command exited with code "))
        .and_then(|c| c.trim().parse().ok())
}

fn last_meaningful_line(text: &str) -> Option<&str> {
    text.lines()
        .map(str::trim)
        .rfind(|l| !l.is_empty() && !is_noise(l) && !is_wrapper(l))
}

fn is_abort_notice(line: &str) -> bool {
    let lower = line.trim().trim_end_matches('.').to_lowercase();
    [
        "command aborted",
        "aborted",
        "operation aborted",
        "request was aborted",
        "the operation was aborted",
        "tool execution was aborted",
        "command cancelled",
        "command canceled",
        "cancelled",
        "canceled",
        "interrupted",
    ]
    .contains(&lower.as_str())
}

fn says_no_match(text: &str) -> bool {
    let lower = text.to_lowercase();
    [
        "no matches",
        "no match found",
        "no results",
        "no files found",
        "0 matches",
    ]
    .iter()
    .any(|c| lower.contains(c))
}

/// Whether a shell command searches (so exit code 1 with no output means "nothing found"): a
/// step of it runs `grep`, `rg`, `git grep`, `which`, `test` and the like as its program (not
/// as an argument: `cargo test` runs tests).
pub fn is_search_command(command: &str) -> bool {
    command
        .split(['|', '&', ';', '(', ')', '\n'])
        .filter_map(|step| {
            let mut words = step
                .split_whitespace()
                .skip_while(|w| w.contains('=') || matches!(*w, "sudo" | "time" | "xargs" | "!"));
            Some((words.next()?, words.next()))
        })
        .any(|(program, next)| {
            matches!(
                program,
                "grep" | "egrep" | "fgrep" | "rg" | "ag" | "ack" | "which" | "test" | "[" | "pgrep"
            ) || (program == "git" && next == Some("grep"))
        })
}

fn is_search_tool(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    ["grep", "search", "find", "glob"]
        .iter()
        .any(|k| name.contains(k))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_search_without_a_match_and_an_abort_are_not_failures() {
        let grep = Some("grep -n \"console\" src/theme.ts");
        assert_eq!(
            tool_outcome(grep, "bash", "Command exited with code 1", true),
            Outcome::NoMatch
        );
        assert_eq!(
            tool_outcome(
                grep,
                "bash",
                "(no output)\n\nCommand exited with code 1",
                true
            ),
            Outcome::NoMatch
        );
        // A missing file is a failure even for grep (exit code 2, a message).
        assert_eq!(
            tool_outcome(
                grep,
                "bash",
                "grep: src/x.ts: No such file or directory\n\nCommand exited with code 2",
                true
            ),
            Outcome::Failed
        );
        // A build that prints nothing and fails is a failure.
        assert_eq!(
            tool_outcome(
                Some("npm run check"),
                "bash",
                "Command exited with code 1",
                true
            ),
            Outcome::Failed
        );
        assert_eq!(
            tool_outcome(Some("sleep 5"), "bash", "Command aborted", true),
            Outcome::Aborted
        );
        assert_eq!(
            tool_outcome(None, "grep", "No matches found", true),
            Outcome::NoMatch
        );
        assert_eq!(tool_outcome(None, "read", "ok", false), Outcome::Succeeded);
        assert!(is_search_command("cd src && grep -n x a.rs | head -5"));
        assert!(is_search_command("git grep foo"));
        assert!(!is_search_command("cargo test"));
        assert!(!is_search_command("npm test -- truncated-text.test.ts"));
    }

    #[test]
    fn the_error_line_skips_banners_and_prefers_what_reads_as_an_error() {
        let npm = "Debugger attached.\n\n> pkg@1.0 test\n> node --test\n\n✖ truncates at newline (2ms)\n\nCommand exited with code 1";
        assert_eq!(
            error_line(npm).as_deref(),
            Some("✖ truncates at newline (2ms)")
        );
        let cp = "Debugger attached.\nWaiting for the debugger to disconnect...\ncp: /a/b.json: No such file or directory\n\n\nCommand exited with code 1";
        assert_eq!(
            error_line(cp).as_deref(),
            Some("cp: /a/b.json: No such file or directory")
        );
        assert_eq!(
            error_line("something odd\nthe last word").as_deref(),
            Some("the last word")
        );
        assert_eq!(
            error_line("Command exited with code 3").as_deref(),
            Some("Command exited with code 3")
        );
        assert_eq!(error_line("\n\n"), None);
    }

    #[test]
    fn instructions_are_rules_not_questions_or_narration() {
        let text = "my dude, this exploded when i restarted with -r. invalid themes must NEVER explode\n\n\
                    ➜  pi-mono git:(main) ✗ npx tsx src/cli.ts -r\nError: Invalid hex color: #000cc";
        assert_eq!(instructions(text), ["invalid themes must NEVER explode"]);
        for not_one in [
            "i don't understand, does it capture the theme variable imported at creation time?",
            "i don't tink the component invalidate works correctly.",
            "ok, i think the component must not be wider than the width.",
            "that is what happens if we don't stream, right?",
            "let me try the light theme, then we should be good to go.",
        ] {
            assert!(instructions(not_one).is_empty(), "{not_one}");
        }
        for one in [
            "Never touch the lockfile.",
            "Always run cargo fmt.",
            "should be dimmer, don't modify the theme, look into the footer sources",
            "in the system prompt make sure you know to read the README.md",
            "ok, don't push yet.",
            "hm, i selected the theme and got a crash, that should never happen.",
        ] {
            assert_eq!(instructions(one), [one], "{one}");
        }
    }

    #[test]
    fn fillers_and_whole_words() {
        assert_eq!(strip_fillers("ok, yeah do it"), "do it");
        assert_eq!(strip_fillers("nothing to do"), "nothing to do");
        assert!(starts_with_words("don't do it", "don't"));
        assert!(!starts_with_words("donut", "don"));
    }
}
