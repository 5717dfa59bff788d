-- :CompactdPreview opens the previewed summary in a scratch buffer; :CompactdCommit writes the
-- buffer's (edited) text, :CompactdDiscard writes nothing, a stale preview is refused;
-- :CompactdUndo gives the compacted messages back and puts the compaction back.
local H = require('helpers')
vim.cmd.runtime('plugin/compactd.lua')

local compactd, demo

--- Sends a request and waits for its answer; fails on an error.
local function call(method, params)
  local answer
  compactd.request(method, params, function(err, result)
    answer = { err = err, result = result }
  end)
  H.wait(method, function()
    return answer ~= nil
  end)
  H.eq(nil, answer.err, method .. ' error')
  return answer.result
end

--- The session's context messages as role and content, comparable across copies.
local function context_messages()
  local ctx = call('session/context', { sessionId = compactd.state.session.sessionId })
  local out = {}
  for _, m in ipairs(ctx.messages) do
    out[#out + 1] = vim.json.encode({ m.role, m.content, m.summary })
  end
  return out
end

local function buffer_text(buf)
  return table.concat(vim.api.nvim_buf_get_lines(buf, 0, -1, false), '\n')
end

local function last_note()
  return H.notes[#H.notes] or {}
end

local compacted_context, undo_entry

return {
  {
    ':CompactdPreview opens the summary in a scratch buffer; the file is unchanged',
    function()
      compactd = H.setup()
      demo = H.demo_copy()
      H.eq(nil, (H.run('CompactdOpen ' .. demo, 'open')), 'open error')
      local size = #H.entries(demo)
      local err, result = H.run('CompactdPreview Keep the list of failing tests.', 'preview', 120000)
      H.eq(nil, err, 'error')
      H.eq('string', type(result.previewId), 'previewId')
      H.eq(result.bufnr, vim.api.nvim_get_current_buf(), 'the preview buffer is current')
      H.eq(result.summary, buffer_text(result.bufnr), 'the buffer holds the summary')
      H.eq('nofile', vim.bo[result.bufnr].buftype, 'a scratch buffer')
      H.eq(result.previewId, compactd.state.previews[result.bufnr].previewId, 'the buffer remembers the previewId')
      H.truthy(vim.wo.winbar:find(':CompactdCommit', 1, true), 'the winbar says how to commit')
      H.eq(size, #H.entries(demo), 'entries')
    end,
  },
  {
    ':CompactdDiscard wipes the buffer and writes nothing',
    function()
      local bytes = table.concat(vim.fn.readfile(demo, 'b'), '\n')
      local buf = vim.api.nvim_get_current_buf()
      local err, result = H.run('CompactdDiscard', 'discard')
      H.eq(nil, err, 'error')
      H.eq('string', type(result.previewId), 'discarded previewId')
      H.eq(false, vim.api.nvim_buf_is_valid(buf), 'buffer wiped')
      H.eq({}, compactd.state.previews, 'no preview left')
      H.eq(bytes, table.concat(vim.fn.readfile(demo, 'b'), '\n'), 'session file')
      local err2 = H.run('CompactdCommit', 'commit')
      H.truthy(err2 and err2.message:find('no compactd preview buffer', 1, true), 'commit without a preview')
    end,
  },
  {
    'a stale preview (the session changed since) is refused with a visible message',
    function()
      local err, result = H.run('CompactdPreview', 'preview', 120000)
      H.eq(nil, err, 'preview error')
      local appended = call('session/append', {
        sessionId = compactd.state.session.sessionId,
        entries = { { type = 'message', message = { role = 'user', content = 'one more thing after the preview' } } },
      })
      local size = #H.entries(demo)
      vim.api.nvim_buf_set_lines(result.bufnr, 0, -1, false, { 'An edit that must not be written' })
      local err2 = H.run('CompactdCommit', 'commit')
      H.eq('leafMoved', err2 and err2.data and err2.data.kind, 'error kind')
      local note = last_note()
      H.eq(vim.log.levels.ERROR, note.level, 'an error message')
      H.truthy(note.msg:find('stale preview', 1, true), 'the message says the preview is stale: ' .. tostring(note.msg))
      H.truthy(note.msg:find(':CompactdPreview', 1, true), 'the message says what to do: ' .. tostring(note.msg))
      H.eq(size, #H.entries(demo), 'nothing written')
      H.eq(appended.leafId, H.entries(demo)[size].id, 'the appended message is the last entry')
      H.truthy(vim.api.nvim_buf_is_valid(result.bufnr), 'the buffer (and the edit) is kept')
      H.eq(nil, (H.run('CompactdDiscard', 'discard')), 'discard error')
    end,
  },
  {
    ':CompactdCommit writes the edited buffer text as the summary',
    function()
      compacted_context = context_messages()
      H.truthy(#compacted_context > 10, 'the context has the messages to compact')
      local before = H.entries(demo)
      local err, result = H.run('CompactdPreview', 'preview', 120000)
      H.eq(nil, err, 'preview error')
      local edited = { '## Goal', '- Hand-edited summary: fix the ledger overflow, keep the regression test.' }
      vim.api.nvim_buf_set_lines(result.bufnr, 0, -1, false, edited)
      local err2, committed = H.run('CompactdCommit', 'commit', 120000)
      H.eq(nil, err2, 'commit error')
      H.eq(false, vim.api.nvim_buf_is_valid(result.bufnr), 'buffer wiped after the commit')
      local new = vim.list_slice(H.entries(demo), #before + 1)
      H.eq(1, #new, 'new entries')
      H.eq('compaction', new[1].type, 'entry type')
      H.eq(committed.entryId, new[1].id, 'entry id')
      H.truthy(vim.startswith(new[1].summary, table.concat(edited, '\n')), 'the summary is the edited text: ' .. new[1].summary)
      H.eq(true, new[1].details.edited, 'details.edited')
      H.eq(committed.entryId, compactd.state.session.leafId, 'leaf tracked')
      local ctx = table.concat(context_messages(), '\n')
      H.truthy(ctx:find('Hand-edited summary', 1, true), "the session's context has the edited text")
      H.truthy(#context_messages() < #compacted_context, 'the context is compacted')
      H.truthy(last_note().msg:find('committed the edited compaction', 1, true), 'message: ' .. tostring(last_note().msg))
    end,
  },
  {
    ':CompactdUndo gives the compacted messages back',
    function()
      local err, result = H.run('CompactdUndo', 'undo')
      H.eq(nil, err, 'error')
      H.eq(false, result.restored, 'restored')
      undo_entry = result.undoEntryId
      H.eq(compacted_context, context_messages(), 'the context as before the compaction')
      H.eq(result.leafId, compactd.state.session.leafId, 'leaf tracked')
      local last = H.entries(demo)
      H.eq(result.leafId, last[#last].id, 'the last copy is the leaf')
    end,
  },
  {
    ':CompactdUndo <undo entry> puts the compaction back',
    function()
      local err, result = H.run('CompactdUndo ' .. undo_entry, 'undo')
      H.eq(nil, err, 'error')
      H.eq(true, result.restored, 'restored')
      local ctx = table.concat(context_messages(), '\n')
      H.truthy(ctx:find('Hand-edited summary', 1, true), 'the edited summary is back')
      local err2 = H.run('CompactdUndo no-such-entry', 'undo')
      H.truthy(err2 and err2.data and err2.data.kind == 'entryNotFound', 'an unknown entry: ' .. vim.inspect(err2))
    end,
  },
}
