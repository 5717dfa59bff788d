--- compactd for Neovim: runs `compactd serve` as an LSP client and drives the current session.
---
--- The daemon is started with `vim.lsp.start` (without attaching buffers: compactd works on
--- sessions, not on text documents), so Neovim's own `$/progress` handling shows compaction
--- progress (`vim.lsp.status()`, `LspProgress`, fidget.nvim ...). Which session is current is
--- remembered per Neovim instance in `state.session`.
local M = {}

--- @class compactd.Options
--- @field cmd string[] The daemon command (default `{ "compactd", "serve" }`).
--- @field cmd_env table<string,string>? Extra environment for the daemon.
--- @field settings table? compactd settings for this connection (`initializationOptions.settings`).
--- @field autostart boolean Start the daemon in `setup()` (default true); else on first use.
M.defaults = {
  cmd = { 'compactd', 'serve' },
  cmd_env = nil,
  settings = nil,
  autostart = true,
}

--- Per-instance state. `session` is the `SessionInfo` of the current session.
M.state = {
  opts = nil, --- @type compactd.Options?
  client_id = nil, --- @type integer?
  ready = false,
  waiting = {}, --- @type fun()[] run once `initialize` has answered
  session = nil, --- @type table?
  progress_token = nil, --- @type string? the running operation's work-done token
  -- Completion callbacks of running operations by work-done token. Neovim's RPC layer drops a
  -- response with code -32800 (RequestCancelled), so a cancelled compaction's callback would
  -- never run; its `$/progress` end ("cancelled") completes it instead.
  operations = {}, --- @type table<string, fun(err: table?, result: any)>
  last = nil, --- @type table? the last command's outcome `{ command, err, result }`
  -- Preview buffers by buffer number: `{ sessionId, previewId, summary, tokensBefore }`.
  previews = {}, --- @type table<integer, table>
  -- Background compactions by operation id: `{ sessionId, state, phase?, chunk?, chunks?,
  -- reason?, message?, token }`; finished ones are dropped.
  background = {}, --- @type table<string, table>
}

local has_011 = vim.fn.has('nvim-0.11') == 1
local token_seq = 0

local function notify(msg, level)
  vim.notify('compactd: ' .. msg, level or vim.log.levels.INFO, { title = 'compactd' })
end

local function get_client()
  local id = M.state.client_id
  return id and vim.lsp.get_client_by_id(id) or nil
end

--- Records a command's outcome (for `:messages`, statuslines and tests) and reports errors.
local function finish(command, err, result, cb)
  M.state.last = { command = command, err = err, result = result }
  if err then
    notify(command .. ' failed: ' .. (err.message or vim.inspect(err)), vim.log.levels.ERROR)
  end
  if cb then
    cb(err, result)
  end
end

local function event_handlers()
  return {
    ['$/progress'] = function(err, params, ctx, config)
      vim.lsp.handlers['$/progress'](err, params, ctx, config)
      local value = params and params.value or {}
      local complete = M.state.operations[params and params.token or '']
      if complete and value.kind == 'end' and value.message == 'cancelled' then
        complete({ code = -32800, message = 'Compaction cancelled', data = { kind = 'cancelled' } }, nil)
      end
    end,
    ['session/autoContinue'] = function(_, params)
      notify('compacted; the agent was asked to continue (' .. params.entryId .. ')')
    end,
    ['session/autoCompactionFinished'] = function(_, params)
      if params.errorMessage then
        notify(params.errorMessage, vim.log.levels.WARN)
      end
    end,
    ['session/backgroundCompaction'] = function(_, params, ctx)
      M.on_background(params, ctx.client_id)
    end,
    ['session/entriesAppended'] = function(_, params)
      local s = M.state.session
      if s and params.sessionId == s.sessionId then
        s.leafId = params.leafId
        s.entryCount = (s.entryCount or 0) + #(params.entries or {})
      end
    end,
    ['session/treeNavigated'] = function(_, params)
      local s = M.state.session
      if s and params.sessionId == s.sessionId then
        s.leafId = params.newLeafId
      end
    end,
  }
end

--- Starts the daemon (once per Neovim instance); returns the client id.
--- @return integer?
function M.start()
  local client = get_client()
  if client then
    return client.id
  end
  local opts = M.state.opts or vim.deepcopy(M.defaults)
  M.state.ready = false
  local config = {
    name = 'compactd',
    cmd = opts.cmd,
    cmd_env = opts.cmd_env,
    root_dir = vim.fn.getcwd(),
    init_options = opts.settings and { settings = opts.settings } or nil,
    handlers = event_handlers(),
    on_init = function(c)
      M.state.client_id = c.id
      M.state.ready = true
      local waiting = M.state.waiting
      M.state.waiting = {}
      for _, fn in ipairs(waiting) do
        fn()
      end
    end,
    on_exit = function(code, signal, client_id)
      if M.state.client_id == client_id then
        M.state.client_id = nil
        M.state.ready = false
        M.state.session = nil
        M.state.progress_token = nil
        M.state.background = {}
      end
      if code ~= 0 then
        notify(('daemon exited with code %d, signal %d'):format(code, signal), vim.log.levels.WARN)
      end
    end,
  }
  local id
  if has_011 then
    id = vim.lsp.start(config, { attach = false })
  else
    -- Neovim 0.10: vim.lsp.start always attaches the current buffer; start_client does not.
    id = vim.lsp.start_client(config)
  end
  if not id then
    notify('could not start ' .. table.concat(opts.cmd, ' '), vim.log.levels.ERROR)
    return nil
  end
  M.state.client_id = id
  return id
end

--- Sends a request once the daemon is initialized; `cb(err, result)` runs on the main loop.
--- @param method string
--- @param params table?
--- @param cb fun(err: table?, result: any)?
function M.request(method, params, cb)
  cb = cb or function() end
  local function send()
    local client = get_client()
    if not client then
      return cb({ message = 'the daemon is not running' }, nil)
    end
    local handler = function(err, result)
      cb(err, result)
    end
    local ok
    if has_011 then
      ok = client:request(method, params or vim.empty_dict(), handler)
    else
      ok = client.request(method, params or vim.empty_dict(), handler)
    end
    if not ok then
      cb({ message = 'the daemon is not running' }, nil)
    end
  end
  if not M.start() then
    return cb({ message = 'the daemon is not running' }, nil)
  end
  if M.state.ready then
    send()
  else
    table.insert(M.state.waiting, send)
  end
end

--- Sends a notification to the daemon (no answer).
function M.notify_server(method, params)
  local client = get_client()
  if not client then
    return
  end
  if has_011 then
    client:notify(method, params)
  else
    client.notify(method, params)
  end
end

local function with_session(command, cb)
  if M.state.session then
    return true
  end
  finish(command, { message = 'no session is open: run :CompactdOpen first' }, nil, cb)
  return false
end

local function new_token(kind)
  token_seq = token_seq + 1
  return ('compactd-%s-%d-%d'):format(kind, vim.fn.getpid(), token_seq)
end

--- Sends a request carrying a fresh work-done token; `cb` runs once, from the response or,
--- for a cancelled operation, from its progress end.
local function tracked_request(kind, method, params, cb)
  local token = new_token(kind)
  params.workDoneToken = token
  local done = false
  local function complete(err, result)
    if done then
      return
    end
    done = true
    M.state.operations[token] = nil
    if M.state.progress_token == token then
      M.state.progress_token = nil
    end
    cb(err, result)
  end
  M.state.operations[token] = complete
  M.state.progress_token = token
  M.request(method, params, complete)
end

--- Opens a session by path, or picks one of the cwd's sessions with `vim.ui.select`.
--- @param path string?
--- @param cb fun(err: table?, session: table?)?
function M.open(path, cb)
  local function open_path(p)
    M.request('session/open', { path = p }, function(err, info)
      if not err then
        M.state.session = info
        notify(('session %s (%d entries)'):format(info.sessionId, info.entryCount))
      end
      finish('open', err, info, cb)
    end)
  end
  if path and path ~= '' then
    return open_path(vim.fn.fnamemodify(path, ':p'))
  end
  M.request('session/list', { cwd = vim.fn.getcwd() }, function(err, result)
    if err then
      return finish('open', err, nil, cb)
    end
    local sessions = result.sessions or {}
    if #sessions == 0 then
      notify('no sessions for ' .. vim.fn.getcwd() .. ' (:CompactdNew creates one)', vim.log.levels.WARN)
      return finish('open', { message = 'no sessions' }, nil, cb)
    end
    vim.ui.select(sessions, {
      prompt = 'Open compactd session',
      kind = 'compactd.session',
      format_item = function(s)
        return ('%s  %s  %s'):format(s.modified or '', s.sessionId, s.title or '')
      end,
    }, function(choice)
      if not choice then
        return finish('open', nil, nil, cb)
      end
      open_path(choice.path)
    end)
  end)
end

--- Creates a session for the cwd and makes it current.
function M.new(title, cb)
  local params = { cwd = vim.fn.getcwd() }
  if title and title ~= '' then
    params.title = title
  end
  M.request('session/create', params, function(err, info)
    if not err then
      M.state.session = info
      notify('new session ' .. info.sessionId)
    end
    finish('new', err, info, cb)
  end)
end

--- Compacts the current session; progress is reported on a work-done token.
--- @param instructions string?
--- @param cb fun(err: table?, result: table?)?
function M.compact(instructions, cb)
  if not with_session('compact', cb) then
    return
  end
  local params = { sessionId = M.state.session.sessionId }
  if instructions and instructions ~= '' then
    params.customInstructions = instructions
  end
  tracked_request('compact', 'session/compact', params, function(err, result)
    if not err then
      M.state.session.leafId = result.entryId or M.state.session.leafId
      notify(('compacted: %d -> %d tokens'):format(result.tokensBefore or 0, result.tokensAfter or 0))
    end
    finish('compact', err, result, cb)
  end)
end

--- Aborts the current session's compaction and branch summary.
function M.abort(cb)
  if not with_session('abort', cb) then
    return
  end
  local sid = M.state.session.sessionId
  M.request('session/abortCompaction', { sessionId = sid }, function(err, result)
    if err then
      return finish('abort', err, nil, cb)
    end
    M.request('session/abortBranchSummary', { sessionId = sid }, function(err2, result2)
      local aborted = (result and result.aborted) or (result2 and result2.aborted) or false
      if not err2 then
        notify(aborted and 'aborted' or 'nothing to abort')
      end
      finish('abort', err2, { aborted = aborted }, cb)
    end)
  end)
end

--- Previews a compaction of the current session (nothing written) and opens its summary in
--- an editable scratch buffer that remembers the `previewId`: `:CompactdCommit` writes the
--- buffer's text, `:CompactdDiscard` drops it.
--- @param instructions string?
--- @param cb fun(err: table?, result: table?)? `result` is the preview with `bufnr` added
function M.preview(instructions, cb)
  if not with_session('preview', cb) then
    return
  end
  local sid = M.state.session.sessionId
  local params = { sessionId = sid, preview = true }
  if instructions and instructions ~= '' then
    params.customInstructions = instructions
  end
  tracked_request('preview', 'session/compact', params, function(err, result)
    if err then
      return finish('preview', err, nil, cb)
    end
    if type(result.previewId) ~= 'string' then
      -- A read-only session's preview cannot be written.
      return finish('preview', { message = 'this session cannot take a previewed compaction (read-only?)' }, result, cb)
    end
    result.bufnr = M.open_preview_buffer(sid, result)
    notify(('preview of %d tokens: edit the summary, then :CompactdCommit (or :CompactdDiscard)'):format(result.tokensBefore or 0))
    finish('preview', nil, result, cb)
  end)
end

--- Opens a preview's summary in a scratch buffer in a new window; returns the buffer.
function M.open_preview_buffer(session_id, result)
  local buf = vim.api.nvim_create_buf(false, true)
  vim.api.nvim_buf_set_name(buf, 'compactd://preview/' .. result.previewId)
  vim.bo[buf].buftype = 'nofile'
  vim.bo[buf].bufhidden = 'hide' -- kept when its window closes: the edits are not lost
  vim.bo[buf].swapfile = false
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, vim.split(result.summary or '', '\n', { plain = true }))
  vim.bo[buf].modified = false
  vim.bo[buf].filetype = 'markdown'
  M.state.previews[buf] = {
    sessionId = session_id,
    previewId = result.previewId,
    summary = result.summary or '',
    tokensBefore = result.tokensBefore,
  }
  vim.api.nvim_create_autocmd('BufWipeout', {
    buffer = buf,
    once = true,
    callback = function()
      M.state.previews[buf] = nil
    end,
  })
  vim.cmd('botright split')
  local win = vim.api.nvim_get_current_win()
  vim.api.nvim_win_set_buf(win, buf)
  vim.wo[win].winbar = ('compactd preview %s: :CompactdCommit writes this text, :CompactdDiscard drops it'):format(result.previewId)
  return buf
end

--- The preview buffer a command acts on: the current buffer, else the newest open preview.
local function preview_buffer()
  local cur = vim.api.nvim_get_current_buf()
  if M.state.previews[cur] then
    return cur
  end
  local newest
  for buf in pairs(M.state.previews) do
    if vim.api.nvim_buf_is_valid(buf) and (not newest or buf > newest) then
      newest = buf
    end
  end
  return newest
end

local function close_preview(buf)
  M.state.previews[buf] = nil
  if vim.api.nvim_buf_is_valid(buf) then
    vim.api.nvim_buf_delete(buf, { force = true })
  end
end

--- Writes the preview of the current preview buffer with the buffer's text as the summary
--- (`session/commitCompaction`; the previewed text is sent as is when unchanged). A preview
--- made stale by a change of the branch is refused (`leafMoved`) and the buffer kept.
--- @param cb fun(err: table?, result: table?)?
function M.commit(cb)
  local buf = preview_buffer()
  local p = buf and M.state.previews[buf]
  if not p then
    return finish('commit', { message = 'no compactd preview buffer: run :CompactdPreview first' }, nil, cb)
  end
  local text = table.concat(vim.api.nvim_buf_get_lines(buf, 0, -1, false), '\n')
  local params = { sessionId = p.sessionId, previewId = p.previewId }
  if text ~= p.summary then
    params.summary = text
  end
  tracked_request('commit', 'session/commitCompaction', params, function(err, result)
    if err then
      local kind = err.data and err.data.kind
      if kind == 'leafMoved' or kind == 'previewNotFound' then
        local why = kind == 'leafMoved' and 'the session changed since the preview'
          or 'the daemon no longer has it (expired, committed or closed)'
        err = vim.tbl_extend('force', err, {
          message = ('stale preview: %s (%s). Nothing was written; preview again with :CompactdPreview (your text stays in this buffer).'):format(why, err.message),
        })
      end
      return finish('commit', err, nil, cb)
    end
    local s = M.state.session
    if s and s.sessionId == p.sessionId then
      s.leafId = result.entryId or s.leafId
    end
    close_preview(buf)
    notify(('committed%s compaction %s: %d -> %d tokens'):format(params.summary and ' the edited' or '', result.entryId, result.tokensBefore or 0, result.tokensAfter or 0))
    finish('commit', nil, result, cb)
  end)
end

--- Wipes the current preview buffer; nothing is written (the daemon lets the preview expire).
function M.discard(cb)
  local buf = preview_buffer()
  local p = buf and M.state.previews[buf]
  if not p then
    return finish('discard', { message = 'no compactd preview buffer to discard' }, nil, cb)
  end
  close_preview(buf)
  notify('preview ' .. p.previewId .. ' discarded; nothing was written')
  finish('discard', nil, { previewId = p.previewId }, cb)
end

--- Undoes the latest compaction on the current session's branch (`session/undoCompaction`),
--- or the compaction `entry_id` names; the `undoEntryId` of an earlier undo puts its
--- compaction back.
--- @param entry_id string?
--- @param cb fun(err: table?, result: table?)?
function M.undo(entry_id, cb)
  if not with_session('undo', cb) then
    return
  end
  local params = { sessionId = M.state.session.sessionId }
  if entry_id and entry_id ~= '' then
    params.entryId = entry_id
  end
  M.request('session/undoCompaction', params, function(err, result)
    if not err then
      M.state.session.leafId = result.leafId
      if result.restored then
        notify(('compaction %s put back (undo entry %s)'):format(result.compactionId, result.undoEntryId))
      else
        notify(('compaction %s undone: its messages are back in the context (:CompactdUndo %s puts it back)'):format(result.compactionId, result.undoEntryId))
      end
    end
    finish('undo', err, result, cb)
  end)
end

-- Background compaction, shown as LSP progress on a token of its own: begin when it starts
-- (drafting, with its phase and summarizer chunk from `session/usage` while it runs), a report
-- when armed, end when committed, handed over as a preview, or discarded (with the reason).

local DISCARD_REASONS = {
  leafLeftBranch = 'the leaf left its branch',
  compactedSince = 'a compaction was written since',
  doesNotFit = 'what was appended since does not fit',
  aborted = 'aborted',
  failed = 'the summarizer failed',
  manualCompaction = 'a manual compaction came first',
}
local BACKGROUND_POLL_MS = 500

--- A line for a background compaction `{ state, phase?, chunk?, chunks?, reason?, message? }`.
function M.format_background(b)
  if b.state == 'started' then
    local text = 'drafting'
    if b.phase then
      text = text .. ': ' .. b.phase
    end
    if b.chunk and b.chunks then
      text = text .. (', chunk %d of %d'):format(b.chunk, b.chunks)
    end
    return text
  elseif b.state == 'armed' then
    return 'armed: ready to swap in at the threshold'
  elseif b.state == 'committed' then
    return 'committed'
  elseif b.state == 'previewed' then
    return 'handed over as a preview'
  end
  local text = 'discarded'
  if b.reason then
    text = text .. ': ' .. (DISCARD_REASONS[b.reason] or b.reason)
  end
  if b.message and b.message ~= '' then
    text = text .. ' (' .. b.message .. ')'
  end
  return text
end

local function background_progress(client_id, b, kind)
  local value = { kind = kind, message = M.format_background(b) }
  if kind == 'begin' then
    value.title = 'Background compaction'
    value.cancellable = false
  end
  vim.lsp.handlers['$/progress'](nil, { token = b.token, value = value }, { client_id = client_id, method = '$/progress' })
end

--- Polls `session/usage` while a background compaction drafts, reporting phase changes.
local function poll_background(client_id, op)
  local b = M.state.background[op]
  if not b or b.state ~= 'started' then
    return
  end
  M.request('session/usage', { sessionId = b.sessionId }, function(err, usage)
    local cur = M.state.background[op]
    if err or cur ~= b or b.state ~= 'started' then
      return
    end
    local bc = usage.backgroundCompaction
    if type(bc) == 'table' and bc.operationId == op and not bc.armed then
      local phase = bc.phase ~= vim.NIL and bc.phase or nil
      local chunk = bc.chunk ~= vim.NIL and bc.chunk or nil
      local chunks = bc.chunks ~= vim.NIL and bc.chunks or nil
      if phase ~= b.phase or chunk ~= b.chunk or chunks ~= b.chunks then
        b.phase, b.chunk, b.chunks = phase, chunk, chunks
        background_progress(client_id, b, 'report')
      end
    end
    vim.defer_fn(function()
      poll_background(client_id, op)
    end, BACKGROUND_POLL_MS)
  end)
end

--- Handles `session/backgroundCompaction`.
function M.on_background(params, client_id)
  local op = params.operationId
  local b = M.state.background[op]
  if not b then
    b = { sessionId = params.sessionId, token = 'compactd-background-' .. op }
    M.state.background[op] = b
    b.state = 'started'
    background_progress(client_id, b, 'begin')
  end
  b.state = params.state
  b.reason = params.reason
  b.message = params.message
  if params.state == 'started' then
    vim.defer_fn(function()
      poll_background(client_id, op)
    end, BACKGROUND_POLL_MS)
  elseif params.state == 'armed' then
    b.phase, b.chunk, b.chunks = nil, nil, nil
    background_progress(client_id, b, 'report')
  else
    M.state.background[op] = nil
    background_progress(client_id, b, 'end')
    local level = params.reason == 'failed' and vim.log.levels.WARN or vim.log.levels.INFO
    notify('background compaction ' .. M.format_background(b), level)
  end
end

--- The current session's background compaction as a statusline item (empty when none), e.g.
--- `compactd: drafting: summarizing, chunk 1 of 3` or `compactd: armed: ...`.
function M.background_status()
  local s = M.state.session
  for _, b in pairs(M.state.background) do
    if s and b.sessionId == s.sessionId then
      return 'compactd: ' .. M.format_background(b)
    end
  end
  return ''
end

--- Formats a usage result as `ctx 142k / 184k (71%)`.
function M.format_usage(u)
  local function k(n)
    if n == nil or n == vim.NIL then
      return '?'
    end
    return n >= 1000 and ('%dk'):format(math.floor(n / 1000 + 0.5)) or tostring(n)
  end
  local limit = u.thresholdTokens
  if limit == nil or limit == vim.NIL then
    limit = u.contextWindow
  end
  local text = ('ctx %s / %s'):format(k(u.contextTokens), k(limit))
  if type(u.percent) == 'number' and type(u.contextTokens) == 'number' then
    text = text .. (' (%d%% of %s)'):format(math.floor(u.percent + 0.5), k(u.contextWindow))
  end
  if u.isCompacting then
    text = text .. ', compacting'
  end
  if u.isSummarizingBranch then
    text = text .. ', summarizing branch'
  end
  local bc = u.backgroundCompaction
  if type(bc) == 'table' then
    text = text .. ', background ' .. (bc.armed and 'armed' or 'drafting')
  end
  return text
end

--- Shows the current session's context usage.
function M.status(cb)
  if not with_session('status', cb) then
    return
  end
  M.request('session/usage', { sessionId = M.state.session.sessionId }, function(err, usage)
    if not err then
      notify(M.state.session.sessionId .. ': ' .. M.format_usage(usage))
    end
    finish('status', err, usage, cb)
  end)
end

--- The picker's rows for a `session/tree` result: file order, one indent per side branch.
function M.tree_items(tree)
  local by_id, level, items = {}, {}, {}
  for _, node in ipairs(tree.nodes or {}) do
    by_id[node.id] = node
  end
  for _, node in ipairs(tree.nodes or {}) do
    local parent = node.parentId ~= vim.NIL and by_id[node.parentId] or nil
    local l = 0
    if parent then
      l = level[parent.id] or 0
      if #parent.children > 1 and parent.children[1] ~= node.id then
        l = l + 1
      end
    end
    level[node.id] = l
    if node.type ~= 'label' and node.type ~= 'compactd_leaf' then
      local kind = node.role ~= vim.NIL and node.role or node.type
      local preview = node.preview ~= vim.NIL and node.preview or ''
      local label = (node.label and node.label ~= vim.NIL) and (' [' .. node.label .. ']') or ''
      local mark = node.id == tree.leafId and '>' or (node.onActivePath and '*' or ' ')
      items[#items + 1] = {
        node = node,
        text = ('%s%s %s %-14s %s%s'):format(string.rep('  ', l), mark, node.id, kind, preview, label),
      }
    end
  end
  return items
end

local SUMMARY_CHOICES = { 'No summary', 'Summarize', 'Summarize with instructions' }

--- Fetches the current session's tree and lets the user pick a row with `vim.ui.select`
--- (`first`, if given, is offered before the entries); `on_pick(item)` gets the row. A failed
--- request or a cancelled pick ends `command` through `finish`.
local function pick_entry(command, prompt, first, cb, on_pick)
  M.request('session/tree', { sessionId = M.state.session.sessionId }, function(err, tree)
    if err then
      return finish(command, err, nil, cb)
    end
    local items = M.tree_items(tree)
    if first then
      table.insert(items, 1, first)
    end
    vim.ui.select(items, {
      prompt = prompt,
      kind = 'compactd.tree',
      format_item = function(item)
        return item.text
      end,
    }, function(item)
      if not item then
        return finish(command, nil, nil, cb)
      end
      on_pick(item)
    end)
  end)
end

--- Picks an entry of the tree, then whether to summarise the branch being left, and navigates.
function M.tree(cb)
  if not with_session('tree', cb) then
    return
  end
  local sid = M.state.session.sessionId
  pick_entry('tree', 'Navigate to entry', nil, cb, function(item)
    vim.ui.select(SUMMARY_CHOICES, {
      prompt = 'Summarize the branch you leave?',
      kind = 'compactd.summary',
    }, function(choice)
      if not choice then
        return finish('tree', nil, nil, cb)
      end
      local function navigate(instructions)
        local params = {
          sessionId = sid,
          targetId = item.node.id,
          summarize = choice ~= SUMMARY_CHOICES[1],
        }
        if instructions and instructions ~= '' then
          params.customInstructions = instructions
        end
        tracked_request('tree', 'session/navigateTree', params, function(nav_err, result)
          if not nav_err and (result.cancelled or result.aborted) then
            notify('navigation cancelled; the leaf is ' .. tostring(result.leafId))
          elseif not nav_err then
            M.state.session.leafId = result.leafId
            if result.editorText and result.editorText ~= vim.NIL then
              -- The reference puts a user message back in the editor; here: the register.
              vim.fn.setreg('"', result.editorText)
              notify('moved to ' .. result.leafId .. '; the message text is in the " register')
            else
              notify('moved to ' .. tostring(result.leafId))
            end
          end
          finish('tree', nav_err, result, cb)
        end)
      end
      if choice == SUMMARY_CHOICES[3] then
        vim.ui.input({ prompt = 'Summary instructions: ' }, function(text)
          if text == nil then
            return finish('tree', nil, nil, cb)
          end
          navigate(text)
        end)
      else
        navigate(nil)
      end
    end)
  end)
end

--- Picks an entry of the tree (or the whole session) and makes a new session of the branch
--- up to it (`session/fork`); the new session becomes the current one. The old one is unchanged.
--- @param cb fun(err: table?, session: table?)?
function M.fork(cb)
  if not with_session('fork', cb) then
    return
  end
  local sid = M.state.session.sessionId
  pick_entry('fork', 'Fork the branch up to', { text = '(the whole session)' }, cb, function(item)
    local params = { sessionId = sid }
    if item.node then
      params.entryId = item.node.id
    end
    M.request('session/fork', params, function(err, info)
      if not err then
        M.state.session = info
        notify(('forked into %s (%d entries)'):format(info.sessionId, info.entryCount))
      end
      finish('fork', err, info, cb)
    end)
  end)
end

--- Configures the plugin; starts the daemon unless `autostart = false`.
--- @param opts compactd.Options?
function M.setup(opts)
  M.state.opts = vim.tbl_deep_extend('force', vim.deepcopy(M.defaults), opts or {})
  require('compactd.commands').define()
  if M.state.opts.autostart then
    M.start()
  end
end

--- Stops the daemon (shutdown, exit).
function M.stop()
  local client = get_client()
  if client then
    if has_011 then
      client:stop()
    else
      client.stop()
    end
  end
end

return M
