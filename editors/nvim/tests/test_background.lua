-- Background compaction shown as LSP progress: a reply in the lead band below the threshold
-- starts it (begin, drafting), it arms (report), the reply that crosses the threshold commits
-- it (end: committed); another one is discarded by a manual compaction (end: discarded with
-- the reason). The extractive summarizer drafts it.
local H = require('helpers')
vim.cmd.runtime('plugin/compactd.lua')

local compactd, session, tokens

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

local function user(text)
  return { type = 'message', message = { role = 'user', content = text } }
end

local function now_ms()
  local t = vim.uv.clock_gettime('realtime')
  return t.sec * 1000 + math.floor(t.nsec / 1e6)
end

--- An assistant reply whose usage says the context has `context_tokens` tokens.
local function assistant(text, context_tokens)
  return {
    type = 'message',
    message = {
      role = 'assistant',
      content = { { type = 'text', text = text } },
      provider = 'anthropic',
      model = 'claude-sonnet-4-5',
      usage = { input = context_tokens, output = 10, cacheRead = 0, cacheWrite = 0, totalTokens = context_tokens + 10 },
      stopReason = 'stop',
      -- Milliseconds: usage older than the latest compaction is ignored.
      timestamp = now_ms(),
    },
  }
end

local function append(entries)
  return call('session/append', { sessionId = session.sessionId, entries = entries })
end

--- The progress seen for background compactions, by token, in order.
local function background_progress()
  local by_token, order = {}, {}
  for _, p in ipairs(H.progress) do
    if type(p.token) == 'string' and vim.startswith(p.token, 'compactd-background-') then
      if not by_token[p.token] then
        by_token[p.token] = {}
        order[#order + 1] = p.token
      end
      table.insert(by_token[p.token], p)
    end
  end
  local out = {}
  for _, token in ipairs(order) do
    out[#out + 1] = by_token[token]
  end
  return out
end

--- Whether the plugin showed a message containing `text`.
local function noted(text)
  for _, n in ipairs(H.notes) do
    if n.msg:find(text, 1, true) then
      return true
    end
  end
  return false
end

local function ended(run)
  return run and run[#run].kind == 'end'
end

return {
  {
    'a background compaction shows drafting, armed and committed as progress',
    function()
      compactd = H.setup()
      local err
      err, session = H.run('CompactdNew background', 'new')
      H.eq(nil, err, 'new error')
      local history = {}
      local bulk = string.rep('lorem ipsum dolor sit amet ', 40)
      for i = 0, 9 do
        history[#history + 1] = user(('Step %d: please edit src/file%d.rs. %s'):format(i, i, bulk))
        history[#history + 1] = assistant(('Done with step %d. %s'):format(i, bulk), 1000)
      end
      append(history)
      tokens = call('session/context', { sessionId = session.sessionId }).tokens
      call('settings/update', {
        target = 'session',
        patch = {
          compaction = {
            keepRecentTokens = 300,
            autoContinue = false,
            thresholdTokens = tokens + 1500,
            background = { leadTokens = 1000 },
          },
        },
      })

      -- Into the band [threshold - 1000, threshold): it starts, and arms.
      append({ assistant('in the band', tokens + 700) })
      H.wait('the background compaction to arm', function()
        local runs = background_progress()
        return #runs == 1 and runs[1][#runs[1]].message:find('^armed') ~= nil
      end)
      local run = background_progress()[1]
      H.eq('begin', run[1].kind, 'first progress')
      H.eq('Background compaction', run[1].title, 'title')
      H.truthy(run[1].message:find('^drafting'), 'drafting: ' .. run[1].message)
      H.truthy(run[1].status:find('Background compaction: drafting', 1, true), 'vim.lsp.status(): ' .. run[1].status)
      H.truthy(compactd.background_status():find('^compactd: armed'), 'statusline: ' .. compactd.background_status())
      local err2, usage = H.run('CompactdStatus', 'status')
      H.eq(nil, err2, 'status error')
      H.truthy(compactd.format_usage(usage):find('background armed', 1, true), 'status: ' .. compactd.format_usage(usage))

      -- The reply that crosses the threshold writes the armed result.
      local crossing = append({ assistant('over the threshold', tokens + 1600) })
      H.eq('string', type(crossing.autoCompaction and crossing.autoCompaction.result.entryId), 'compacted')
      H.wait('the committed progress', function()
        return ended(background_progress()[1])
      end)
      run = background_progress()[1]
      H.eq('committed', run[#run].message, 'last progress')
      H.eq('', compactd.background_status(), 'statusline once committed')
      local entries = H.entries(session.path)
      local compactions = vim.tbl_filter(function(e)
        return e.type == 'compaction'
      end, entries)
      H.eq(1, #compactions, 'compaction entries')
      H.eq(crossing.autoCompaction.result.entryId, compactions[1].id, 'the committed entry')
      H.truthy(noted('background compaction committed'), 'message')
    end,
  },
  {
    'a discarded background compaction shows the reason',
    function()
      append({ user('go on') })
      append({ assistant('back in the band', tokens + 700) })
      H.wait('a second background compaction to arm', function()
        local runs = background_progress()
        return #runs == 2 and runs[2][#runs[2]].message:find('^armed') ~= nil
      end)
      local err = H.run('CompactdCompact', 'compact', 120000)
      H.eq(nil, err, 'compact error')
      H.wait('the discarded progress', function()
        return ended(background_progress()[2])
      end)
      local run = background_progress()[2]
      H.eq('discarded: a manual compaction came first', run[#run].message, 'last progress')
      H.truthy(noted('background compaction discarded: a manual compaction came first'), 'message')
      H.eq({}, compactd.state.background, 'no background compaction left')
    end,
  },
  {
    'while it drafts, the progress has its phase from session/usage; :CompactdAbort discards it',
    function()
      -- A model endpoint on 127.0.0.1 that takes completion requests and never answers (other
      -- requests, such as a probe of a local server's slots, get a 404 at once).
      local server = assert(vim.uv.new_tcp())
      local connections, requests = {}, 0
      assert(server:bind('127.0.0.1', 0))
      assert(server:listen(16, function()
        local conn = assert(vim.uv.new_tcp())
        server:accept(conn)
        connections[#connections + 1] = conn
        conn:read_start(function(_, data)
          if data and data:find('POST', 1, true) then
            requests = requests + 1
          elseif data and data:find('^GET ') then
            conn:write('HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n')
          end
        end)
      end))
      call('settings/update', {
        target = 'session',
        patch = {
          summarizer = { kind = 'openai', model = 'slow/never' },
          providers = {
            slow = {
              kind = 'openai',
              baseUrl = ('http://127.0.0.1:%d/v1'):format(server:getsockname().port),
              apiKey = 'not-a-real-key',
              models = { never = { contextWindow = 200000 } },
            },
          },
          retry = { enabled = false },
        },
      })
      append({ user('and on') })
      append({ assistant('in the band again', tokens + 700) })
      H.wait('the summarizer request', function()
        return requests > 0
      end)
      H.wait('the phase in the progress', function()
        local runs = background_progress()
        local run = runs[3]
        return run and run[#run].message:find('^drafting: summarizing') ~= nil
      end)
      local run = background_progress()[3]
      H.eq('report', run[#run].kind, 'a report')
      H.truthy(compactd.background_status():find('^compactd: drafting: summarizing'), 'statusline: ' .. compactd.background_status())

      local err, result = H.run('CompactdAbort', 'abort')
      H.eq(nil, err, 'abort error')
      H.eq(true, result.aborted, 'aborted')
      H.wait('the discarded progress', function()
        return ended(background_progress()[3])
      end)
      run = background_progress()[3]
      H.eq('discarded: aborted', run[#run].message, 'last progress')
      for _, c in ipairs(connections) do
        c:close()
      end
      server:close()
    end,
  },
  {
    'the drafting line has the phase and chunk from session/usage',
    function()
      H.eq('drafting: summarizing, chunk 2 of 5', compactd.format_background({ state = 'started', phase = 'summarizing', chunk = 2, chunks = 5 }), 'drafting')
      H.eq('discarded: the summarizer failed (model down)', compactd.format_background({ state = 'discarded', reason = 'failed', message = 'model down' }), 'failed')
      H.eq('handed over as a preview', compactd.format_background({ state = 'previewed' }), 'previewed')
    end,
  },
}
