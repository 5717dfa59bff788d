//! The reads: `session/context`, `session/tree` and `session/usage`.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use crate::protocol::{
    SessionContextParams, SessionContextResult, SessionRef, SessionTreeParams, SessionTreeResult,
    SessionUsageResult, TreeNode,
};
use crate::rpc::{RequestCtx, RpcError};
use crate::server::{Daemon, to_proto};

pub async fn context(
    daemon: Arc<Daemon>,
    _: RequestCtx,
    params: SessionContextParams,
) -> Result<SessionContextResult, RpcError> {
    let view = daemon
        .engine
        .context(&params.session_id, params.tokenizer.as_deref())
        .await
        .map_err(to_proto::error)?;
    let per_message = params.per_message.unwrap_or(false);
    Ok(SessionContextResult {
        message_tokens: per_message.then(|| view.messages.iter().map(|m| m.tokens).collect()),
        messages: view
            .messages
            .iter()
            .map(|m| to_proto::message(&m.message))
            .collect(),
        tokens: view.total_tokens,
        context_window: view.context_window,
        threshold_tokens: view.threshold,
        leaf_id: view.leaf_id,
        thinking_level: view.thinking_level,
        models: view
            .model
            .map(|model| BTreeMap::from([("default".to_owned(), model)]))
            .unwrap_or_default(),
    })
}

pub async fn tree(
    daemon: Arc<Daemon>,
    _: RequestCtx,
    params: SessionTreeParams,
) -> Result<SessionTreeResult, RpcError> {
    let view = daemon
        .engine
        .tree(&params.session_id)
        .await
        .map_err(to_proto::error)?;
    let mut entries = HashMap::new();
    if params.include_entries.unwrap_or(false) {
        let state = daemon
            .engine
            .state(&params.session_id)
            .map_err(to_proto::error)?;
        let session = state.session.read().await;
        for node in &view.nodes {
            if let Some(entry) = session.get(&node.id) {
                entries.insert(node.id.clone(), to_proto::entry(entry));
            }
        }
    }
    let ids: HashSet<&str> = view.nodes.iter().map(|n| n.id.as_str()).collect();
    let active: HashSet<&str> = view.active_path.iter().map(String::as_str).collect();
    let mut children: HashMap<&str, Vec<String>> = HashMap::new();
    let mut roots = Vec::new();
    for node in &view.nodes {
        match node.parent_id.as_deref().filter(|p| ids.contains(p)) {
            Some(parent) => children.entry(parent).or_default().push(node.id.clone()),
            None => roots.push(node.id.clone()),
        }
    }
    let nodes = view
        .nodes
        .iter()
        .map(|node| TreeNode {
            id: node.id.clone(),
            parent_id: node.parent_id.clone(),
            entry_type: node.entry_type.clone(),
            role: node.role.clone(),
            timestamp: node.timestamp.clone(),
            preview: (!node.preview.is_empty()).then(|| node.preview.clone()),
            label: node.label.clone(),
            children: children.remove(node.id.as_str()).unwrap_or_default(),
            on_active_path: active.contains(node.id.as_str()),
            entry: entries.remove(&node.id),
        })
        .collect();
    Ok(SessionTreeResult {
        leaf_id: view.leaf_id,
        roots,
        nodes,
    })
}

pub async fn usage(
    daemon: Arc<Daemon>,
    _: RequestCtx,
    params: SessionRef,
) -> Result<SessionUsageResult, RpcError> {
    let engine = &daemon.engine;
    let view = engine
        .usage(&params.session_id)
        .await
        .map_err(to_proto::error)?;
    let state = engine.state(&params.session_id).map_err(to_proto::error)?;
    let settings = engine.session_settings(&state).map_err(to_proto::error)?;
    Ok(SessionUsageResult {
        context_tokens: view.context_tokens,
        context_window: view.context_window,
        threshold_tokens: view.threshold,
        percent: view.percent,
        is_compacting: state.ops.is_compacting(),
        is_summarizing_branch: state.ops.is_summarizing_branch(),
        auto_compaction_enabled: settings.compaction.enabled,
    })
}
