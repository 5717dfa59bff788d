-- Each command against a copy of the demo session, with the extractive summarizer.
local H = require('helpers')
vim.cmd.runtime('plugin/compactd.lua')

local compactd, demo

local function text_of(content)
  if type(content) == 'string' then
    return content
  end
  local parts = {}
  for _, b in ipairs(content or {}) do
    if b.type == 'text' then
      parts[#parts + 1] = b.text
    end
  end
  return table.concat(parts)
end

local function info_sid()
  return compactd.state.session.sessionId
end

local function tokens_with(prefix)
  local seen, out = {}, {}
  for _, p in ipairs(H.progress) do
    if type(p.token) == 'string' and vim.startswith(p.token, prefix) and not seen[p.token] then
      seen[p.token] = true
      out[#out + 1] = p.token
    end
  end
  return out
end

return {
  {
    'setup() starts the daemon through vim.lsp',
    function()
      compactd = H.setup()
      local client = H.truthy(vim.lsp.get_client_by_id(compactd.state.client_id), 'client')
      H.eq('compactd', client.name, 'client name')
      H.eq('compactd', (client.server_info or {}).name, 'server name')
      H.eq({}, vim.lsp.get_clients({ bufnr = 0 }), 'clients attached to the buffer')
    end,
  },
  {
    ':CompactdOpen <path> opens a session file',
    function()
      demo = H.demo_copy()
      local err, info = H.run('CompactdOpen ' .. demo, 'open')
      H.eq(nil, err, 'error')
      H.eq(#H.entries(demo), info.entryCount, 'entryCount')
      H.eq(info.sessionId, compactd.state.session.sessionId, 'current session')
    end,
  },
  {
    ':CompactdStatus shows the context usage',
    function()
      local err, usage = H.run('CompactdStatus', 'status')
      H.eq(nil, err, 'error')
      H.eq('number', type(usage.contextWindow), 'contextWindow')
      H.eq(false, usage.isCompacting, 'isCompacting')
      H.truthy(compactd.format_usage(usage):match('^ctx %S+ / %d+k'), 'formatted usage')
      H.eq('compactd: ' .. info_sid() .. ': ' .. compactd.format_usage(usage), H.notes[#H.notes].msg, 'message')
    end,
  },
  {
    ':CompactdCompact compacts, writes the entry and reports $/progress',
    function()
      local before = H.entries(demo)
      local err, result = H.run('CompactdCompact Keep the list of failing tests.', 'compact', 120000)
      H.eq(nil, err, 'error')
      local after = H.entries(demo)
      local new = vim.list_slice(after, #before + 1)
      H.eq(1, #new, 'new entries')
      H.eq('compaction', new[1].type, 'entry type')
      H.eq(result.entryId, new[1].id, 'entry id')
      H.eq(before[#before].id, new[1].parentId, 'parent is the old leaf')
      H.eq(result.firstKeptEntryId, new[1].firstKeptEntryId, 'firstKeptEntryId')
      H.truthy(#new[1].summary > 0, 'summary text')
      H.eq(new[1].id, compactd.state.session.leafId, 'leaf tracked')

      local tokens = tokens_with('compactd-compact-')
      H.eq(1, #tokens, 'compaction progress tokens')
      local kinds = H.progress_kinds(tokens[1])
      H.eq('begin', kinds[1], 'first progress')
      H.eq('end', kinds[#kinds], 'last progress')
      local shown = false
      for _, p in ipairs(H.progress) do
        if p.token == tokens[1] and p.kind == 'begin' then
          shown = p.status:find(p.title, 1, true) ~= nil
        end
      end
      H.truthy(shown, 'vim.lsp.status() shows the compaction')
    end,
  },
  {
    ':CompactdCompact on a compacted leaf reports alreadyCompacted',
    function()
      local size = #H.entries(demo)
      local err = H.run('CompactdCompact', 'compact')
      H.eq('alreadyCompacted', err and err.data and err.data.kind, 'error kind')
      H.eq(size, #H.entries(demo), 'entries')
    end,
  },
  {
    ':CompactdTree moves to a user message and summarises the branch left',
    function()
      local before = H.entries(demo)
      local target
      H.choosers = {
        function(items)
          for _, item in ipairs(items) do
            if item.node.role == 'user' then
              target = item.node
              return item
            end
          end
        end,
        function(items)
          H.eq('Summarize', items[2], 'second choice')
          return items[2]
        end,
      }
      local err, result = H.run('CompactdTree', 'tree', 120000)
      H.eq(nil, err, 'error')
      local tree_pick = H.select_calls[#H.select_calls - 1]
      H.eq('Navigate to entry', tree_pick.prompt, 'picker prompt')
      H.truthy(#tree_pick.shown >= 40, 'picker rows')

      local after = H.entries(demo)
      local new = vim.list_slice(after, #before + 1)
      H.eq(1, #new, 'new entries')
      H.eq('branch_summary', new[1].type, 'entry type')
      H.eq(target.parentId, new[1].parentId, 'summary attached at the target parent')
      H.eq(new[1].id, result.leafId, 'new leaf')
      H.truthy(#new[1].summary > 0, 'summary text')

      local target_entry
      for _, e in ipairs(before) do
        if e.id == target.id then
          target_entry = e
        end
      end
      H.eq(text_of(target_entry.message.content), vim.fn.getreg('"'), 'editor text in the register')

      local tokens = tokens_with('compactd-tree-')
      H.eq(1, #tokens, 'tree progress tokens')
      local kinds = H.progress_kinds(tokens[1])
      H.eq('begin', kinds[1], 'first progress')
      H.eq('end', kinds[#kinds], 'last progress')
    end,
  },
  {
    ':CompactdTree without a summary persists the new leaf',
    function()
      local before = H.entries(demo)
      local target
      H.choosers = {
        function(items)
          for _, item in ipairs(items) do
            if item.node.role == 'assistant' and not item.node.onActivePath then
              target = item.node
              return item
            end
          end
        end,
        function(items)
          return items[1]
        end,
      }
      local err, result = H.run('CompactdTree', 'tree', 60000)
      H.eq(nil, err, 'error')
      H.eq(target.id, result.leafId, 'new leaf')
      local new = vim.list_slice(H.entries(demo), #before + 1)
      H.eq(1, #new, 'new entries')
      H.eq('compactd_leaf', new[1].type, 'leaf marker')
      H.eq(target.id, new[1].parentId, 'marker points at the target')
    end,
  },
  {
    ':CompactdFork makes a session of the branch up to a picked entry and switches to it',
    function()
      local source = compactd.state.session
      local picked
      H.choosers = {
        function(items)
          H.eq('(the whole session)', items[1].text, 'first choice')
          picked = items[3]
          return picked
        end,
      }
      local err, info = H.run('CompactdFork', 'fork')
      H.eq(nil, err, 'error')
      H.truthy(info.sessionId ~= source.sessionId, 'a new session')
      H.eq(info.sessionId, compactd.state.session.sessionId, 'current session')
      local entries = H.entries(info.path)
      local last = #entries
      while entries[last].type == 'label' do
        last = last - 1 -- labels of the branch are re-appended after it
      end
      H.eq(picked.node.id, entries[last].id, 'the branch ends at the picked entry')
      H.truthy(#entries < source.entryCount, 'fewer entries than the source')
      compactd.state.session = source
    end,
  },
  {
    ':CompactdAbort with nothing running says so',
    function()
      local err, result = H.run('CompactdAbort', 'abort')
      H.eq(nil, err, 'error')
      H.eq(false, result.aborted, 'aborted')
    end,
  },
  {
    ':CompactdNew, then :CompactdOpen picks among the cwd sessions',
    function()
      local err, info = H.run('CompactdNew scratch', 'new')
      H.eq(nil, err, 'error')
      local appended
      compactd.request('session/append', {
        sessionId = info.sessionId,
        entries = { { type = 'message', message = { role = 'user', content = 'hello' } } },
      }, function(e, r)
        appended = { e, r }
      end)
      H.wait('append', function()
        return appended ~= nil
      end)
      H.eq(nil, appended[1], 'append error')
      compactd.state.session = nil

      H.choosers = {
        function(items)
          for _, s in ipairs(items) do
            if s.sessionId == info.sessionId then
              return s
            end
          end
        end,
      }
      local err2, opened = H.run('CompactdOpen', 'open')
      H.eq(nil, err2, 'error')
      H.eq(info.sessionId, opened.sessionId, 'opened session')
      H.eq(info.sessionId, compactd.state.session.sessionId, 'current session')
      H.eq('Open compactd session', H.select_calls[#H.select_calls].prompt, 'picker prompt')
    end,
  },
  {
    ':checkhealth compactd reports the running daemon',
    function()
      vim.cmd('checkhealth compactd')
      local text = table.concat(vim.api.nvim_buf_get_lines(0, 0, -1, false), '\n')
      H.truthy(text:find('daemon running', 1, true), 'health text:\n' .. text)
      H.truthy(text:find('current session', 1, true), 'health text:\n' .. text)
      H.truthy(not text:find('ERROR', 1, true), 'no errors in:\n' .. text)
      vim.cmd('silent! tabclose')
    end,
  },
}
