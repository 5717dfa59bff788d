//! Tests of defaults, layering, provenance, validation, redaction, updates and the schema.

use std::fs;
use std::path::{Path, PathBuf};

use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use tempfile::TempDir;

use super::model::{HookSettings, Tokenizer};
use super::paths::project_settings_file;
use super::stack::ExplainedSetting;
use super::*;

/// A temp home with a user file and a project directory.
struct Fixture {
    _dir: TempDir,
    user_file: PathBuf,
    project_dir: PathBuf,
}

impl Fixture {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("create temp dir");
        let user_file = dir.path().join("config").join("settings.json");
        let project_dir = dir.path().join("project");
        fs::create_dir_all(project_dir.join(".compactd")).expect("create project dir");
        Fixture {
            _dir: dir,
            user_file,
            project_dir,
        }
    }

    fn write_user(&self, text: &str) {
        fs::create_dir_all(self.user_file.parent().expect("user file has a parent"))
            .expect("create config dir");
        fs::write(&self.user_file, text).expect("write user file");
    }

    fn write_project(&self, text: &str) {
        fs::write(project_settings_file(&self.project_dir), text).expect("write project file");
    }

    fn load(&self) -> Result<SettingsStack, SettingsError> {
        SettingsStack::load(Some(&self.user_file), Some(&self.project_dir))
    }
}

fn explained<'a>(explain: &'a [ExplainedSetting], key: &str) -> &'a ExplainedSetting {
    explain
        .iter()
        .find(|setting| setting.key == key)
        .unwrap_or_else(|| panic!("explain() has no key {key}"))
}

#[test]
fn defaults_match_the_spec() {
    let settings = Settings::default();
    let c = &settings.compaction;
    assert!(c.enabled && c.auto_continue && c.prune_enabled && c.overflow_recovery);
    assert_eq!(c.reserve_tokens, 16_384);
    assert_eq!(c.keep_recent_tokens, 20_000);
    assert_eq!(c.remote_endpoint(), None);
    assert_eq!(c.remote_timeout_ms, 120_000);
    assert!(!c.allow_insecure_http);
    assert!(!settings.branch_summary.enabled);
    assert_eq!(settings.branch_summary.reserve_tokens, 16_384);
    assert_eq!(
        (
            settings.retry.enabled,
            settings.retry.max_retries,
            settings.retry.base_delay_ms
        ),
        (true, 3, 2_000)
    );
    assert!(settings.model_roles.is_empty());
    assert_eq!(settings.summarizer.kind, SummarizerKind::Auto);
    assert_eq!(settings.tokenizer, Tokenizer::O200k);
    assert_eq!(settings.hooks.timeout_ms, 30_000);
    assert_eq!(settings.summarizer.client_timeout_ms, 120_000);
    assert_eq!(settings.log.level, "info");
    assert_eq!(settings.storage.sync, StorageSync::Os);
    assert_eq!(
        settings.providers["openai"].base_url(),
        "https://api.openai.com/v1"
    );
    assert_eq!(
        settings.providers["anthropic"].api_key_env(),
        "ANTHROPIC_API_KEY"
    );
    // The empty object is a complete configuration, equal to the defaults.
    assert_eq!(
        serde_json::from_value::<Settings>(json!({})).unwrap(),
        settings
    );
    assert_eq!(SettingsStack::new().effective().unwrap(), settings);
}

#[test]
fn thresholds_match_the_spec_numbers() {
    let settings = Settings::default();
    assert_eq!(settings.threshold_tokens(200_000), Some(183_616));
    assert_eq!(settings.threshold_tokens(128_000), Some(111_616));
    assert_eq!(settings.effective_reserve(200_000), 16_384);
    assert!(settings.should_compact(183_617, 200_000));
    assert!(!settings.should_compact(183_616, 200_000));
}

#[test]
fn a_zero_window_never_compacts() {
    let settings = Settings::default();
    assert_eq!(settings.threshold_tokens(0), None);
    assert_eq!(settings.effective_reserve(0), 0);
    assert!(!settings.should_compact(u64::MAX, 0));
}

#[test]
fn threshold_overrides_and_clamping() {
    let mut settings = Settings::default();
    settings.compaction.threshold_percent = Some(75);
    assert_eq!(settings.threshold_tokens(200_000), Some(150_000));
    assert_eq!(settings.effective_reserve(200_000), 50_000);

    // Tokens win over percent, and are clamped to [1, window - 1].
    settings.compaction.threshold_tokens = Some(100_000);
    assert_eq!(settings.threshold_tokens(200_000), Some(100_000));
    assert_eq!(settings.threshold_tokens(50_000), Some(49_999));

    // A window smaller than the reserve still leaves a threshold of at least 1.
    let small = Settings::default();
    assert_eq!(small.threshold_tokens(8_000), Some(1));
    assert_eq!(small.threshold_tokens(1), Some(1));

    let mut percent = Settings::default();
    percent.compaction.threshold_percent = Some(1);
    assert_eq!(percent.threshold_tokens(50), Some(1));
}

#[test]
fn disabled_compaction_never_compacts_on_threshold() {
    let mut settings = Settings::default();
    settings.compaction.enabled = false;
    assert!(!settings.should_compact(199_999, 200_000));
}

#[test]
fn context_windows_come_from_providers_or_default_to_128k() {
    let stack = SettingsStack::new()
        .with_request(&json!({
            "providers": {"local": {"baseUrl": "http://localhost:11434/v1",
                                    "models": {"qwen3": {"contextWindow": 32768}}}}
        }))
        .unwrap();
    let settings = stack.effective().unwrap();
    assert_eq!(settings.context_window_for("local/qwen3"), 32_768);
    assert_eq!(settings.context_window_for("QWEN3"), 32_768);
    assert_eq!(
        settings.context_window_for("anthropic/claude-sonnet-4-5"),
        200_000
    );
    assert_eq!(
        settings.context_window_for("nobody/knows"),
        DEFAULT_CONTEXT_WINDOW
    );
    // A custom provider without a kind speaks the OpenAI protocol, with OpenAI's key variable.
    assert_eq!(settings.providers["local"].kind, ProviderKind::Openai);
    assert_eq!(settings.providers["local"].api_key_env(), "OPENAI_API_KEY");
}

#[test]
fn layers_merge_with_provenance() {
    let fixture = Fixture::new();
    fixture.write_user(r#"{"compaction": {"reserveTokens": 20000, "keepRecentTokens": 30000}}"#);
    fixture.write_project(r#"{"compaction": {"keepRecentTokens": 40000}, "tokenizer": "chars4"}"#);
    let mut stack = fixture.load().unwrap();
    stack
        .set_initialize(&json!({"branchSummary": {"enabled": true}}))
        .unwrap();
    let stack = stack
        .with_request(&json!({"retry": {"maxRetries": 1}}))
        .unwrap();

    let settings = stack.effective().unwrap();
    assert_eq!(settings.compaction.reserve_tokens, 20_000);
    assert_eq!(settings.compaction.keep_recent_tokens, 40_000);
    assert_eq!(settings.tokenizer, Tokenizer::Chars4);
    assert!(settings.branch_summary.enabled);
    assert_eq!(settings.retry.max_retries, 1);
    // Siblings not mentioned by any layer keep their defaults.
    assert!(settings.compaction.auto_continue);

    let explain = stack.explain();
    let project_file = project_settings_file(&fixture.project_dir);
    let cases: [(&str, Value, SettingsSource, Option<&Path>); 6] = [
        (
            "compaction.reserveTokens",
            json!(20000),
            SettingsSource::User,
            Some(&fixture.user_file),
        ),
        (
            "compaction.keepRecentTokens",
            json!(40000),
            SettingsSource::Project,
            Some(&project_file),
        ),
        (
            "branchSummary.enabled",
            json!(true),
            SettingsSource::Initialize,
            None,
        ),
        ("retry.maxRetries", json!(1), SettingsSource::Request, None),
        (
            "compaction.enabled",
            json!(true),
            SettingsSource::Default,
            None,
        ),
        ("modelRoles", json!({}), SettingsSource::Default, None),
    ];
    for (key, value, source, file) in cases {
        let setting = explained(&explain, key);
        assert_eq!(
            (&setting.value, setting.source, setting.file.as_deref()),
            (&value, source, file),
            "{key}"
        );
    }
    assert!(
        explain
            .iter()
            .all(|s| !matches!(s.value, Value::Object(ref m) if !m.is_empty()))
    );
}

#[test]
fn explain_names_map_keys_with_dots_unambiguously() {
    let explain = SettingsStack::new().explain();
    let setting = explained(
        &explain,
        r#"providers.openai.models["gpt-4.1"].contextWindow"#,
    );
    assert_eq!(
        setting.path,
        ["providers", "openai", "models", "gpt-4.1", "contextWindow"]
    );
}

#[test]
fn null_resets_a_key_to_the_layer_below() {
    let fixture = Fixture::new();
    fixture.write_user(r#"{"compaction": {"reserveTokens": 20000}}"#);
    fixture.write_project(r#"{"compaction": {"reserveTokens": null}}"#);
    let stack = fixture.load().unwrap();
    assert_eq!(stack.effective().unwrap().compaction.reserve_tokens, 20_000);
    let setting = explained(&stack.explain(), "compaction.reserveTokens").clone();
    assert_eq!(setting.source, SettingsSource::User);

    let stack = stack.with_request(&json!({"compaction": null})).unwrap();
    assert_eq!(stack.effective().unwrap().compaction.reserve_tokens, 20_000);
}

#[test]
fn unknown_keys_are_rejected_with_path_and_file() {
    let fixture = Fixture::new();
    fixture.write_user(r#"{"compaction": {"reserveTokenz": 1}}"#);
    let error = fixture.load().unwrap_err().to_string();
    let expected_prefix = format!(
        "settings error in {}: compaction.reserveTokenz: unknown field `reserveTokenz`",
        fixture.user_file.display()
    );
    assert!(error.starts_with(&expected_prefix), "{error}");
}

#[test]
fn wrong_types_are_rejected_with_path_and_file() {
    let fixture = Fixture::new();
    fixture.write_project(r#"{"compaction": {"reserveTokens": "lots"}}"#);
    let error = fixture.load().unwrap_err().to_string();
    assert_eq!(
        error,
        format!(
            "settings error in {}: compaction.reserveTokens: invalid type: string \"lots\", \
             expected u64",
            project_settings_file(&fixture.project_dir).display()
        )
    );
}

#[test]
fn errors_in_client_layers_name_the_layer() {
    let error = SettingsStack::new()
        .with_request(&json!({"tokenizer": "words"}))
        .unwrap_err()
        .to_string();
    assert!(error.starts_with("settings error in request overrides: tokenizer: unknown variant"));
    let error = SettingsStack::new()
        .set_initialize(&json!([1, 2]))
        .unwrap_err()
        .to_string();
    assert_eq!(
        error,
        "settings error in initialize options: settings must be a JSON object"
    );
}

#[test]
fn broken_json_names_the_file_and_position() {
    let fixture = Fixture::new();
    fixture.write_user("{\n  \"compaction\": {,\n}");
    let error = fixture.load().unwrap_err().to_string();
    assert!(
        error.starts_with(&format!(
            "settings error in {}: invalid JSON:",
            fixture.user_file.display()
        )),
        "{error}"
    );
    assert!(error.contains("line 2"), "{error}");
}

#[test]
fn a_broken_user_file_falls_back_with_a_warning() {
    let fixture = Fixture::new();
    fixture.write_user(r#"{"compaction": {"reserveTokens": "lots"}}"#);
    fixture.write_project(r#"{"compaction": {"keepRecentTokens": 1000}}"#);
    let stack =
        SettingsStack::load_with_fallback(Some(&fixture.user_file), Some(&fixture.project_dir));
    let settings = stack.effective().unwrap();
    assert_eq!(settings.compaction.reserve_tokens, 16_384);
    assert_eq!(settings.compaction.keep_recent_tokens, 1_000);
    let [warning] = stack.warnings() else {
        panic!("expected one warning, got {:?}", stack.warnings());
    };
    assert_eq!(warning.source, SettingsSource::User);
    assert!(
        warning.message.contains("compaction.reserveTokens"),
        "{}",
        warning.message
    );
}

#[test]
fn missing_and_empty_files_are_empty_layers() {
    let fixture = Fixture::new();
    let stack = fixture.load().unwrap();
    assert_eq!(stack.effective().unwrap(), Settings::default());
    fixture.write_user("  \n");
    let stack = fixture.load().unwrap();
    assert!(stack.warnings().is_empty());
    assert_eq!(stack.effective().unwrap(), Settings::default());
}

#[test]
fn semantic_checks_name_the_key_and_layer() {
    let cases = [
        (
            json!({"compaction": {"thresholdPercent": 100}}),
            "compaction.thresholdPercent",
        ),
        (
            json!({"compaction": {"thresholdPercent": 0}}),
            "compaction.thresholdPercent",
        ),
        (
            json!({"compaction": {"thresholdTokens": 0}}),
            "compaction.thresholdTokens",
        ),
        (
            json!({"providers": {"openai": {"models": {"tiny": {"contextWindow": 0}}}}}),
            "providers.openai.models.tiny.contextWindow",
        ),
        (
            json!({"compaction": {"remoteEndpoint": "http://example.com/s"}}),
            "compaction.remoteEndpoint",
        ),
        (json!({"summarizer": {"kind": "remote"}}), "summarizer.kind"),
        (
            json!({"summarizer": {"model": "gpt-4o"}}),
            "summarizer.model",
        ),
        (
            json!({"summarizer": {"model": "nowhere/x"}}),
            "summarizer.model",
        ),
        (
            json!({"summarizer": {"kind": "anthropic", "model": "openai/gpt-4o"}}),
            "summarizer.model",
        ),
        (
            json!({"summarizer": {"candidates": ["openai/gpt-4o", "bad"]}}),
            "summarizer.candidates.1",
        ),
        (
            json!({"hooks": {"compactingTimeoutMs": 0}}),
            "hooks.compactingTimeoutMs",
        ),
        (
            json!({"storage": {"sessionsDir": "relative/dir"}}),
            "storage.sessionsDir",
        ),
        (json!({"log": {"level": "loud=[=]"}}), "log.level"),
        (
            json!({"providers": {"x": {"apiKeyEnv": "sk-abc def"}}}),
            "providers.x.apiKeyEnv",
        ),
    ];
    for (overrides, key) in cases {
        let error = SettingsStack::new().with_request(&overrides).unwrap_err();
        let message = error.to_string();
        assert!(
            message.starts_with(&format!("settings error in request overrides: {key}: ")),
            "{overrides}: {message}"
        );
    }
}

#[test]
fn valid_overrides_pass_validation() {
    let overrides = json!({
        "compaction": {"thresholdPercent": 80, "remoteEndpoint": "http://127.0.0.1:9000/summarize",
                       "remoteTokenEnv": "COMPACTD_REMOTE_TOKEN"},
        "summarizer": {"kind": "openai", "model": "openai/gpt-4o",
                       "candidates": ["anthropic/claude-haiku-4-5"]},
        "modelRoles": {"smol": "gpt-4o-mini"},
        "storage": {"sync": "fsync"},
        "log": {"level": "compactd=debug"},
    });
    let settings = SettingsStack::new()
        .with_request(&overrides)
        .unwrap()
        .effective()
        .unwrap();
    assert_eq!(settings.storage.sync, StorageSync::Fsync);
    assert_eq!(
        settings.compaction.remote_endpoint(),
        Some("http://127.0.0.1:9000/summarize")
    );
    // An empty remote endpoint means local summarization (spec §4.14).
    let settings = SettingsStack::new()
        .with_request(&json!({"compaction": {"remoteEndpoint": ""}}))
        .unwrap()
        .effective()
        .unwrap();
    assert_eq!(settings.compaction.remote_endpoint(), None);
}

#[test]
fn hook_timeouts_fall_back_to_the_default() {
    let hooks = HookSettings {
        before_tree_timeout_ms: Some(5),
        ..HookSettings::default()
    };
    assert_eq!(hooks.before_tree_timeout().as_millis(), 5);
    assert_eq!(hooks.compacting_timeout().as_millis(), 30_000);
}

#[test]
fn api_keys_are_redacted_everywhere() {
    let secret = "sk-very-secret";
    let stack = SettingsStack::new()
        .with_request(&json!({"providers": {"openai": {"apiKey": secret}}}))
        .unwrap();
    let settings = stack.effective().unwrap();
    assert_eq!(
        settings.providers["openai"]
            .api_key
            .as_ref()
            .map(SecretString::expose),
        Some(secret)
    );

    assert!(!format!("{settings:?}").contains(secret));
    assert!(!format!("{stack:?}").contains(secret));
    assert!(!serde_json::to_string(&settings).unwrap().contains(secret));
    let explain = stack.explain();
    assert_eq!(
        explained(&explain, "providers.openai.apiKey").value,
        json!(REDACTED)
    );
    assert!(!serde_json::to_string(&explain).unwrap().contains(secret));
}

#[test]
fn update_of_the_user_file_is_validated_and_atomic() {
    let fixture = Fixture::new();
    let original =
        "{\n  \"log\": {\"level\": \"debug\"},\n  \"compaction\": {\"reserveTokens\": 20000}\n}\n";
    fixture.write_user(original);
    let mut stack = fixture.load().unwrap();

    for bad in [
        json!({"compaction": {"reserveTokens": "lots"}}),
        json!({"compaction": {"thresholdPercent": 150}}),
        json!({"nonsense": true}),
        json!("not an object"),
    ] {
        let error = stack.update(UpdateTarget::UserFile, &bad);
        assert!(error.is_err(), "{bad} was accepted");
        assert_eq!(fs::read_to_string(&fixture.user_file).unwrap(), original);
        assert_eq!(stack.effective().unwrap().compaction.reserve_tokens, 20_000);
    }

    let settings = stack
        .update(
            UpdateTarget::UserFile,
            &json!({"compaction": {"reserveTokens": null, "keepRecentTokens": 5000}}),
        )
        .unwrap();
    assert_eq!(settings.compaction.reserve_tokens, 16_384);
    assert_eq!(settings.compaction.keep_recent_tokens, 5_000);
    // The file keeps the user's other keys and order, and nothing else is left in the dir.
    let written: Value =
        serde_json::from_str(&fs::read_to_string(&fixture.user_file).unwrap()).unwrap();
    assert_eq!(
        written,
        json!({"log": {"level": "debug"}, "compaction": {"keepRecentTokens": 5000}})
    );
    let keys: Vec<_> = written.as_object().unwrap().keys().cloned().collect();
    assert_eq!(keys, ["log", "compaction"]);
    let entries: Vec<_> = fs::read_dir(fixture.user_file.parent().unwrap())
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .collect();
    assert_eq!(entries, ["settings.json"]);
    // A reload sees what the update reported.
    assert_eq!(fixture.load().unwrap().effective().unwrap(), settings);
}

#[test]
fn update_creates_the_user_file_and_its_directory() {
    let fixture = Fixture::new();
    let mut stack = SettingsStack::load(Some(&fixture.user_file), None).unwrap();
    stack
        .update(UpdateTarget::UserFile, &json!({"tokenizer": "cl100k"}))
        .unwrap();
    let written: Value =
        serde_json::from_str(&fs::read_to_string(&fixture.user_file).unwrap()).unwrap();
    assert_eq!(written, json!({"tokenizer": "cl100k"}));
    assert_eq!(
        explained(&stack.explain(), "tokenizer").source,
        SettingsSource::User
    );
}

#[test]
fn update_refuses_to_overwrite_a_broken_user_file() {
    let fixture = Fixture::new();
    fixture.write_user("{ not json");
    let mut stack =
        SettingsStack::load_with_fallback(Some(&fixture.user_file), Some(&fixture.project_dir));
    assert_eq!(stack.warnings().len(), 1);
    let error = stack
        .update(UpdateTarget::UserFile, &json!({"tokenizer": "cl100k"}))
        .unwrap_err();
    assert!(matches!(error, SettingsError::Syntax { .. }), "{error}");
    assert_eq!(
        fs::read_to_string(&fixture.user_file).unwrap(),
        "{ not json"
    );
}

#[test]
fn update_of_the_initialize_layer_stays_in_memory() {
    let fixture = Fixture::new();
    let mut stack = fixture.load().unwrap();
    stack
        .update(
            UpdateTarget::Initialize,
            &json!({"retry": {"enabled": false}}),
        )
        .unwrap();
    stack
        .update(
            UpdateTarget::Initialize,
            &json!({"retry": {"maxRetries": 7}}),
        )
        .unwrap();
    let settings = stack.effective().unwrap();
    assert_eq!(
        (settings.retry.enabled, settings.retry.max_retries),
        (false, 7)
    );
    assert!(!fixture.user_file.exists());
    assert!(
        stack
            .update(
                UpdateTarget::Initialize,
                &json!({"retry": {"maxRetries": -1}})
            )
            .is_err()
    );
    assert_eq!(stack.effective().unwrap().retry.max_retries, 7);
}

#[test]
fn update_without_a_user_file_is_an_error() {
    let mut stack = SettingsStack::new();
    let error = stack
        .update(UpdateTarget::UserFile, &json!({}))
        .unwrap_err();
    assert!(matches!(error, SettingsError::NoUserFile));
}

#[test]
fn sessions_take_their_project_layer_from_their_cwd() {
    let fixture = Fixture::new();
    fixture.write_project(r#"{"compaction": {"enabled": false}}"#);
    let base = SettingsStack::load(Some(&fixture.user_file), None).unwrap();
    let session = base.with_project_dir(&fixture.project_dir).unwrap();
    assert!(!session.effective().unwrap().compaction.enabled);
    assert!(base.effective().unwrap().compaction.enabled);
    let elsewhere = session
        .with_project_dir(fixture.user_file.parent().unwrap())
        .unwrap();
    assert!(elsewhere.effective().unwrap().compaction.enabled);
}

#[test]
fn the_schema_has_descriptions_and_defaults() {
    let schema = settings_schema();
    assert_eq!(
        schema["$schema"],
        "https://json-schema.org/draft/2020-12/schema"
    );
    assert_eq!(schema["additionalProperties"], false);
    let compaction = &schema["$defs"]["CompactionSettings"]["properties"];
    assert_eq!(compaction["reserveTokens"]["default"], 16384);
    assert!(
        compaction["reserveTokens"]["description"]
            .as_str()
            .is_some_and(|d| d.contains("Headroom"))
    );
    assert_eq!(compaction["thresholdPercent"]["maximum"], 99);
    assert_eq!(schema["properties"]["tokenizer"]["default"], "o200k");
    // Every default value the schema advertises deserializes.
    let defaults: Value = schema["properties"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(key, property)| (key.clone(), property["default"].clone()))
        .collect::<serde_json::Map<_, _>>()
        .into();
    assert_eq!(
        serde_json::from_value::<Settings>(defaults).unwrap(),
        Settings::default()
    );
}

/// Found by the `settings` fuzz target: a file with invalid UTF-8 failed as "cannot read the
/// file: stream did not contain valid UTF-8", with no hint where the bad byte is.
#[test]
fn invalid_utf8_is_a_syntax_error_with_its_line_and_column() {
    let fixture = Fixture::new();
    fs::create_dir_all(fixture.user_file.parent().expect("user file has a parent"))
        .expect("create config dir");
    fs::write(
        &fixture.user_file,
        b"{\n  \"log\": {\"level\": \"\xff\"}\n}\n",
    )
    .expect("write user file");
    let error = fixture.load().unwrap_err();
    assert!(matches!(error, SettingsError::Syntax { .. }), "{error}");
    assert_eq!(
        error.to_string(),
        format!(
            "settings error in {}: invalid UTF-8 at line 2 column 21",
            fixture.user_file.display()
        )
    );
}
