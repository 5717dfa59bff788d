//! What one operation on a session runs with ([`CompactEnv`]) and the one place it is built,
//! for the daemon and the command line alike ([`EnvSource::env`]): the session's settings, its
//! token counter, the summarizer candidates, the hooks, the prompt templates and the context
//! window.

use std::path::PathBuf;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::settings::Settings;
use crate::summarize::{summarizers_for_choice, summarizers_from_settings};
use crate::tokens::counter_by_name;

use super::hooks::NoHooks;
use super::{
    EngineError, EngineHooks, Prompts, Summarizer, SummarizerChoice, SummarizerSet, TokenCounter,
};

/// Everything a compaction or branch summary needs besides the session; built by
/// [`EnvSource::env`].
#[derive(Clone)]
pub struct CompactEnv {
    pub settings: Settings,
    pub counter: Arc<dyn TokenCounter>,
    pub summarizers: SummarizerSet,
    pub hooks: Arc<dyn EngineHooks>,
    pub prompts: Arc<Prompts>,
    /// The session model's context window (for budgets such as the branch summary's).
    pub context_window: u64,
    /// The session id, for hook requests and the client summarizer.
    pub session_id: String,
    /// The operation id of this run (what its events carry), for hook requests; may be empty
    /// when nothing reports events (CLI, tests).
    pub operation_id: String,
}

/// Builds the client summarizer for one session (its requests name the session).
pub type ClientSummarizerFactory = Arc<dyn Fn(&str) -> Arc<dyn Summarizer> + Send + Sync>;

/// What the engine adds to a session's settings to make a [`CompactEnv`]: the hooks, the
/// client summarizer and the prompt templates. The daemon sets the first two from what the
/// client offered; the command line uses [`EnvSource::standalone`].
pub struct EnvSource {
    hooks: RwLock<Arc<dyn EngineHooks>>,
    client_summarizer: RwLock<Option<ClientSummarizerFactory>>,
    /// Where the user's prompt overrides are: the embedded templates, each replaced by the
    /// file of the same name in this directory when there is one. Read for every operation,
    /// so an edited template applies to the next one without a restart. A file that exists
    /// but cannot be read fails the operation with a `settingsInvalid` error naming it: a
    /// summary is never written with another prompt than the one the user chose, and nothing
    /// is written at all.
    prompt_overrides: Option<PathBuf>,
}

fn read<T>(lock: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    // The guarded values are replaced whole; a panicking writer cannot leave them half-set.
    lock.read().unwrap_or_else(|p| p.into_inner())
}

fn write<T>(lock: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(|p| p.into_inner())
}

impl Default for EnvSource {
    fn default() -> Self {
        EnvSource::standalone()
    }
}

impl EnvSource {
    /// No hooks, no client summarizer, the user's prompt overrides in
    /// `<config dir>/prompts/`.
    pub fn standalone() -> Self {
        let user = crate::settings::config_dir().map(|d| d.join("prompts"));
        EnvSource::with_prompt_overrides(user)
    }

    /// No hooks, no client summarizer, the prompt overrides in `dir` (none: the embedded
    /// templates).
    pub fn with_prompt_overrides(dir: Option<PathBuf>) -> Self {
        EnvSource {
            hooks: RwLock::new(Arc::new(NoHooks)),
            client_summarizer: RwLock::new(None),
            prompt_overrides: dir,
        }
    }

    pub fn set_hooks(&self, hooks: Arc<dyn EngineHooks>) {
        *write(&self.hooks) = hooks;
    }

    /// A client summarizer built per session, so its requests can name the session.
    pub fn set_client_summarizer_factory(&self, factory: Option<ClientSummarizerFactory>) {
        *write(&self.client_summarizer) = factory;
    }

    /// The environment of an operation on session `session_id` with its effective
    /// `settings`. `context_window` is the window of the session's model
    /// ([`session_window`](super::usage::session_window): its `default` model, else
    /// `modelRoles.default`) or, for an auto-compaction, of the reply's model; `tokenizer`
    /// overrides the `tokenizer` setting. Fails on an unknown tokenizer, a summarizer setting
    /// that cannot be used, or a prompt override that cannot be read.
    pub fn env(
        &self,
        session_id: &str,
        settings: Settings,
        context_window: u64,
        tokenizer: Option<&str>,
    ) -> Result<CompactEnv, EngineError> {
        let choice = SummarizerChoice::default();
        self.env_with_choice(session_id, settings, context_window, tokenizer, &choice)
    }

    /// [`env`](Self::env) for an operation that asked for a summarizer (the CLI's
    /// `--summarizer` / `--model`): a chosen summarizer that cannot run is an
    /// `invalidParams` error naming why, not a silent fall back to the extractive one.
    pub fn env_with_choice(
        &self,
        session_id: &str,
        settings: Settings,
        context_window: u64,
        tokenizer: Option<&str>,
        choice: &SummarizerChoice,
    ) -> Result<CompactEnv, EngineError> {
        let counter = token_counter(&settings, tokenizer)?;
        let client = read(&self.client_summarizer)
            .as_ref()
            .map(|factory| factory(session_id));
        let summarizers = if choice.is_empty() {
            summarizers_from_settings(&settings, client)?
        } else {
            summarizers_for_choice(&settings, client, choice)?
        };
        let settings = choice.applied_to(settings);
        let prompts = Prompts::load(self.prompt_overrides.as_deref())
            .map(Arc::new)
            .map_err(|e| EngineError::Settings(format!("prompt template not readable: {e}")))?;
        Ok(CompactEnv {
            settings,
            counter,
            summarizers,
            hooks: read(&self.hooks).clone(),
            prompts,
            context_window,
            session_id: session_id.to_owned(),
            operation_id: String::new(),
        })
    }
}

/// The counter named `tokenizer` (a `tokenizer` setting value), else the one `settings` name.
pub fn token_counter(
    settings: &Settings,
    tokenizer: Option<&str>,
) -> Result<Arc<dyn TokenCounter>, EngineError> {
    let name = match tokenizer {
        Some(t) => t.to_owned(),
        None => tokenizer_name(settings),
    };
    counter_by_name(&name).ok_or_else(|| {
        EngineError::InvalidParams(format!(
            "unknown tokenizer {name:?} (expected chars4, o200k or cl100k)"
        ))
    })
}

/// The `tokenizer` setting's name.
pub fn tokenizer_name(settings: &Settings) -> String {
    match serde_json::to_value(settings.tokenizer) {
        Ok(serde_json::Value::String(s)) => s,
        _ => "o200k".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prompt_override_that_cannot_be_read_fails_the_operation_until_it_is_fixed() {
        let dir = tempfile::tempdir().unwrap();
        let template = dir
            .path()
            .join(crate::summarize::prompts::COMPACTION_SUMMARY);
        // A directory where the template file should be: it exists and cannot be read.
        std::fs::create_dir(&template).unwrap();
        let source = EnvSource::with_prompt_overrides(Some(dir.path().to_owned()));
        let error = match source.env("s", Settings::default(), 128_000, None) {
            Err(e) => e,
            Ok(_) => panic!("a broken override must fail the operation"),
        };
        assert_eq!(error.kind(), crate::engine::EngineErrorKind::Settings);
        assert!(
            error.to_string().contains(&template.display().to_string()),
            "{error}"
        );
        // Fixed on disk: the next operation reads it, no restart needed.
        std::fs::remove_dir(&template).unwrap();
        std::fs::write(&template, "Summarise it my way.").unwrap();
        let env = source.env("s", Settings::default(), 128_000, None).unwrap();
        assert_eq!(env.prompts.summary, "Summarise it my way.");
        assert_eq!(env.session_id, "s");
        assert_eq!(env.context_window, 128_000);
    }

    #[test]
    fn the_tokenizer_argument_overrides_the_setting() {
        let source = EnvSource::with_prompt_overrides(None);
        let env = source
            .env("s", Settings::default(), 0, Some("chars4"))
            .unwrap();
        assert_eq!(env.counter.name(), "chars4");
        assert!(token_counter(&Settings::default(), Some("nope")).is_err());
        assert_eq!(
            token_counter(&Settings::default(), None).unwrap().name(),
            tokenizer_name(&Settings::default())
        );
    }
}
