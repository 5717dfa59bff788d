//! Every example exchange in docs/protocol.md (the ```jsonl blocks) must be valid JSON-RPC
//! that deserialises into the protocol's Rust types without losing a field, and every method
//! and error kind (the transport's too) must be documented there.

use std::collections::HashMap;

use compactd::protocol::{ErrorKind, METHODS, MessageKind, MethodSpec};
use compactd::rpc::{RpcError, TransportErrorKind};
use serde_json::Value;

pub(crate) fn docs() -> String {
    std::fs::read_to_string(devtools::fixtures::repo_file("docs/protocol.md"))
        .expect("docs/protocol.md exists")
}

/// The lines of every ```jsonl block, with their line numbers in the file.
pub(crate) fn example_blocks(docs: &str) -> Vec<Vec<(usize, &str)>> {
    let mut blocks = Vec::new();
    let mut current: Option<Vec<(usize, &str)>> = None;
    for (index, line) in docs.lines().enumerate() {
        match (&mut current, line.trim()) {
            (None, "```jsonl") => current = Some(Vec::new()),
            (Some(_), "```") => blocks.extend(current.take()),
            (Some(block), text) if !text.is_empty() => block.push((index + 1, line)),
            _ => {}
        }
    }
    assert!(current.is_none(), "a ```jsonl block is not closed");
    blocks
}

/// Whether everything in `original` survived the round trip through the Rust type: a field
/// the type does not know (a typo in the docs) would be dropped and fail this.
fn subset(original: &Value, roundtrip: Option<&Value>, path: &str) -> Result<(), String> {
    match (original, roundtrip) {
        (Value::Null, None | Some(Value::Null)) => Ok(()),
        (Value::Object(a), Some(Value::Object(b))) => a
            .iter()
            .try_for_each(|(k, v)| subset(v, b.get(k), &format!("{path}.{k}"))),
        (Value::Array(a), Some(Value::Array(b))) if a.len() == b.len() => a
            .iter()
            .zip(b)
            .enumerate()
            .try_for_each(|(i, (x, y))| subset(x, Some(y), &format!("{path}[{i}]"))),
        (Value::Number(a), Some(Value::Number(b))) if a.as_f64() == b.as_f64() => Ok(()),
        (a, Some(b)) if a == b => Ok(()),
        (a, b) => Err(format!("`{path}`: {a} became {b:?}")),
    }
}

fn check(spec: &compactd::testkit::TypeSpec, value: &Value, what: &str) -> Result<(), String> {
    let roundtrip = spec
        .roundtrip(value.clone())
        .map_err(|e| format!("{what} does not deserialise: {e}"))?;
    subset(value, Some(&roundtrip), what)
}

fn check_line(
    line: &str,
    pending: &mut HashMap<String, &'static MethodSpec>,
) -> Result<(), String> {
    let message: Value = serde_json::from_str(line).map_err(|e| format!("not JSON: {e}"))?;
    if message.get("jsonrpc") != Some(&Value::from("2.0")) {
        return Err("missing \"jsonrpc\":\"2.0\"".into());
    }
    let id = message.get("id").map(Value::to_string);
    if let Some(method) = message.get("method").and_then(Value::as_str) {
        let spec = MethodSpec::find(method).ok_or(format!("unknown method {method}"))?;
        let params = message.get("params").cloned().unwrap_or(Value::Null);
        check(&spec.params, &params, &format!("{method} params"))?;
        match (id, spec.kind) {
            (Some(id), MessageKind::Request) => {
                if pending.insert(id.clone(), spec).is_some() {
                    return Err(format!("id {id} is already awaiting an answer"));
                }
            }
            (None, MessageKind::Notification) => {}
            (_, kind) => return Err(format!("{method} is a {kind:?}, sent as the other kind")),
        }
        return Ok(());
    }
    let id = id.ok_or("neither a request, a notification nor a response")?;
    let spec = pending
        .remove(&id)
        .ok_or(format!("response to id {id}, which nobody asked"))?;
    match (message.get("result"), message.get("error")) {
        (Some(result), None) => {
            let result_spec = spec.result.as_ref().expect("requests have results");
            check(result_spec, result, &format!("{} result", spec.name))
        }
        (None, Some(error)) => {
            let error: RpcError = serde_json::from_value(error.clone())
                .map_err(|e| format!("malformed error object: {e}"))?;
            let name = error.kind().ok_or("an error without data.kind")?;
            let code = ErrorKind::from_name(name)
                .map(ErrorKind::code)
                .or_else(|| TransportErrorKind::from_name(name).map(TransportErrorKind::code))
                .ok_or(format!("unknown error kind {name}"))?;
            if code == error.code {
                Ok(())
            } else {
                Err(format!("kind {name} has code {code}, not {}", error.code))
            }
        }
        _ => Err("a response needs exactly one of result and error".into()),
    }
}

#[test]
fn example_exchanges_deserialise_into_the_protocol_types() {
    let docs = docs();
    let blocks = example_blocks(&docs);
    assert!(
        blocks.len() >= 2,
        "docs/protocol.md should have example exchanges"
    );
    let mut failures = Vec::new();
    for block in &blocks {
        let mut pending = HashMap::new();
        for (number, line) in block {
            if let Err(e) = check_line(line, &mut pending) {
                failures.push(format!("docs/protocol.md:{number}: {e}"));
            }
        }
        let unanswered: Vec<_> = pending
            .iter()
            .map(|(id, m)| format!("{id} ({})", m.name))
            .collect();
        if !unanswered.is_empty() {
            let start = block.first().map_or(0, |(n, _)| *n);
            failures.push(format!(
                "docs/protocol.md:{start}: requests never answered in the example: {}",
                unanswered.join(", ")
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn the_checker_rejects_unknown_fields_and_wrong_types() {
    let mut pending = HashMap::new();
    let typo = r#"{"jsonrpc":"2.0","id":1,"method":"session/compact","params":{"sessionId":"s","customInstruction":"x"}}"#;
    assert!(
        check_line(typo, &mut pending)
            .unwrap_err()
            .contains("customInstruction")
    );
    let wrong = r#"{"jsonrpc":"2.0","method":"session/autoContinue","params":{"sessionId":"s","prompt":1,"entryId":"e"}}"#;
    assert!(check_line(wrong, &mut pending).is_err());
    let orphan = r#"{"jsonrpc":"2.0","id":9,"result":{}}"#;
    assert!(check_line(orphan, &mut pending).is_err());
}

#[test]
fn every_method_and_error_kind_is_documented() {
    let docs = docs();
    let missing: Vec<String> = METHODS
        .iter()
        .map(|m| m.name.to_owned())
        .chain(ErrorKind::ALL.iter().map(|k| k.name().to_owned()))
        .chain(ErrorKind::ALL.iter().map(|k| k.code().to_string()))
        .chain(TransportErrorKind::ALL.iter().map(|k| k.name().to_owned()))
        .chain(TransportErrorKind::ALL.iter().map(|k| k.code().to_string()))
        .filter(|name| {
            !docs.contains(&format!("`{name}`")) && !docs.contains(&format!("| {name} |"))
        })
        .collect();
    assert!(
        missing.is_empty(),
        "docs/protocol.md does not mention: {missing:?}"
    );
}
