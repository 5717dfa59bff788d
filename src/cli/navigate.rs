//! `compactd navigate SESSION TARGET_ID`: move the session's leaf to another entry, optionally
//! summarising the branch being left.

use std::path::PathBuf;
use std::sync::Arc;

use crate::engine::{NavigateOptions, NavigateOutcome, SharedSession, navigate_tree};
use crate::server::to_proto;

use super::common::{self, CliError, TokenizerArg};
use super::compact::{StderrProgress, engine_env, open_writable, run_cancellable};

/// Arguments of `compactd navigate`.
#[derive(Debug, clap::Args)]
pub struct NavigateArgs {
    /// The session file (`.jsonl`).
    pub session: PathBuf,
    /// The entry to move to. A user message is re-opened for editing: the leaf goes to its
    /// parent and its text is printed.
    pub target_id: String,
    /// Summarise the branch being left and attach the summary at the new position.
    #[arg(long)]
    pub summarize: bool,
    /// What the branch summary should focus on (appended to the prompt).
    #[arg(long)]
    pub instructions: Option<String>,
    /// Print the result as JSON (a `session/navigateTree` result, the protocol's schema).
    #[arg(long)]
    pub json: bool,
    /// Token counter (default: the `tokenizer` setting).
    #[arg(long, value_enum)]
    pub tokenizer: Option<TokenizerArg>,
}

pub fn run(args: &NavigateArgs) -> Result<(), CliError> {
    let mut session = open_writable(&args.session)?;
    let settings = common::settings_for(&mut session);
    let env = engine_env(&session, settings, args.tokenizer)?;
    let shared: SharedSession = Arc::new(tokio::sync::RwLock::new(session));
    let opts = NavigateOptions {
        summarize: args.summarize,
        custom_instructions: args.instructions.clone(),
        ..NavigateOptions::default()
    };
    let progress = StderrProgress::new();
    let outcome = run_cancellable(|cancel| {
        let (shared, env, progress, target) = (&shared, &env, &progress, &args.target_id);
        async move { navigate_tree(shared, env, target, opts, cancel, progress).await }
    })?;
    progress.finish();
    let outcome = outcome.map_err(|e| CliError::new(format!("{}: {e}", args.session.display())))?;
    if args.json {
        return common::print_json(&to_proto::navigate_result(outcome));
    }
    common::print(&pretty(&outcome))
}

fn pretty(o: &NavigateOutcome) -> String {
    if o.cancelled {
        return "navigation cancelled (nothing written)\n".to_owned();
    }
    let show = |id: &Option<String>| id.clone().unwrap_or_else(|| "(root)".to_owned());
    let mut text = format!(
        "leaf: {} (was {})\n",
        show(&o.leaf_id),
        show(&o.old_leaf_id)
    );
    if let Some(entry) = &o.summary_entry {
        text.push_str(&format!("branch summary entry {}\n", entry.id));
        text.push_str(&common::fallback_lines(
            o.report
                .iter()
                .map(|report| (crate::engine::Purpose::Branch, report)),
        ));
        if let crate::session::EntryKind::BranchSummary(b) = entry.kind() {
            text.push('\n');
            text.push_str(b.summary.trim_end());
            text.push('\n');
        }
    }
    if let Some(editor) = &o.editor_text {
        text.push_str(&format!("\neditor text:\n{editor}\n"));
    }
    text
}
