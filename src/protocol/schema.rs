//! JSON Schema generation: one file per message type, the `protocol.schema.json` bundle
//! (every method with its params and result), and the settings schema.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use schemars::generate::SchemaSettings;
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::errors::ResponseError;
use super::{CLI_OUTPUTS, ErrorKind, METHODS, PROTOCOL_VERSION, concurrency_name};
use crate::rpc::TransportErrorKind;

/// A params or result type, type-erased for the method table.
#[derive(Debug, Clone, Copy)]
pub struct TypeSpec {
    /// The schema's name (the Rust type name for named types, `null` for `()`).
    pub name: fn() -> Cow<'static, str>,
    /// Whether the schema is inlined rather than named (`()`, primitives): such types get
    /// no file of their own.
    pub inline: fn() -> bool,
    subschema: fn(&mut SchemaGenerator) -> Schema,
    root: fn() -> Schema,
    roundtrip: fn(Value) -> Result<Value, String>,
}

impl TypeSpec {
    /// The spec of `T`.
    pub const fn of<T: JsonSchema + Serialize + DeserializeOwned>() -> TypeSpec {
        TypeSpec {
            name: T::schema_name,
            inline: T::inline_schema,
            subschema: subschema::<T>,
            root: root::<T>,
            roundtrip: roundtrip::<T>,
        }
    }

    /// Deserialises `value` as this type and serialises it again: checks that a message has
    /// this type's shape, and shows which of its fields the type keeps.
    pub fn roundtrip(&self, value: Value) -> Result<Value, String> {
        (self.roundtrip)(value)
    }

    /// The type's standalone schema (with its own `$defs`).
    pub fn root_schema(&self) -> Schema {
        (self.root)()
    }
}

fn settings() -> SchemaSettings {
    SchemaSettings::draft2020_12()
}

fn subschema<T: JsonSchema>(generator: &mut SchemaGenerator) -> Schema {
    generator.subschema_for::<T>()
}

fn root<T: JsonSchema>() -> Schema {
    settings().into_generator().into_root_schema_for::<T>()
}

fn roundtrip<T: Serialize + DeserializeOwned>(value: Value) -> Result<Value, String> {
    let typed: T = serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        format!("at `{path}`: {}", e.into_inner())
    })?;
    serde_json::to_value(&typed).map_err(|e| e.to_string())
}

/// `protocol.schema.json`: every method (name, direction, kind, concurrency class,
/// description, params and result as `$ref`s), every error kind (the transport's marked
/// `transport: true`), the schema of a response's `error` object, the `--json` output of
/// every CLI command, and the `$defs`.
pub fn protocol_bundle() -> Value {
    let mut generator = settings().into_generator();
    let methods: Vec<Value> = METHODS
        .iter()
        .map(|m| {
            let mut row = json!({
                "method": m.name,
                "direction": m.direction,
                "kind": m.kind,
            });
            if let Some(concurrency) = m.concurrency {
                row["concurrency"] = concurrency_name(concurrency).into();
            }
            row["description"] = m.description().into();
            row["params"] = (m.params.subschema)(&mut generator).to_value();
            if let Some(result) = &m.result {
                row["result"] = (result.subschema)(&mut generator).to_value();
            }
            row
        })
        .collect();
    let transport = TransportErrorKind::ALL.iter().map(|kind| {
        json!({
            "kind": kind.name(),
            "code": kind.code(),
            "message": kind.message(),
            "transport": true,
        })
    });
    let errors: Vec<Value> = ErrorKind::ALL
        .iter()
        .map(|kind| {
            json!({
                "kind": kind.name(),
                "code": kind.code(),
                "message": kind.default_message(),
            })
        })
        .chain(transport)
        .collect();
    let cli: Vec<Value> = CLI_OUTPUTS
        .iter()
        .map(|c| {
            json!({
                "command": c.command,
                "output": (c.output.subschema)(&mut generator).to_value(),
            })
        })
        .collect();
    // Every response's `error`, whatever the method.
    let error = generator.subschema_for::<ResponseError>().to_value();
    let definitions = generator.take_definitions(true);
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "compactd protocol",
        "description": "JSON-RPC 2.0 methods of compactd. Each method's params and result refer \
            to $defs; see docs/protocol.md.",
        "protocolVersion": PROTOCOL_VERSION,
        "methods": methods,
        "errors": errors,
        "cli": cli,
        "error": error,
        "$defs": definitions,
    })
}

/// Every schema file, by file name: `protocol.schema.json`, `settings.schema.json` and one
/// `<Type>.json` per named params, result or CLI output type, sorted.
pub fn protocol_schemas() -> Vec<(String, Value)> {
    let mut types = BTreeMap::new();
    let specs = METHODS
        .iter()
        .flat_map(|m| std::iter::once(&m.params).chain(&m.result))
        .chain(CLI_OUTPUTS.iter().map(|c| &c.output));
    for spec in specs {
        if !(spec.inline)() {
            types
                .entry(format!("{}.json", (spec.name)()))
                .or_insert_with(|| spec.root_schema().to_value());
        }
    }
    let mut files = vec![
        ("protocol.schema.json".to_owned(), protocol_bundle()),
        (
            "settings.schema.json".to_owned(),
            crate::settings::settings_schema(),
        ),
    ];
    files.extend(types);
    files
}

/// The text a schema file holds: pretty JSON with a final newline.
pub fn schema_file_text(value: &Value) -> String {
    // Serialising a `Value` cannot fail: its map keys are strings.
    let mut text = serde_json::to_string_pretty(value).expect("a JSON value serialises");
    text.push('\n');
    text
}

/// Writes [`protocol_schemas`] into `dir` (created if missing); returns the paths written.
/// Files already there that compactd no longer generates are left alone.
pub fn write_schemas(dir: &Path) -> io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    protocol_schemas()
        .into_iter()
        .map(|(name, value)| {
            let path = dir.join(name);
            std::fs::write(&path, schema_file_text(&value))?;
            Ok(path)
        })
        .collect()
}
