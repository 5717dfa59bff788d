-- :CompactdAbort while the summarizer is still waiting for its model: nothing is written.
local H = require('helpers')
vim.cmd.runtime('plugin/compactd.lua')

-- A model endpoint on 127.0.0.1 that takes requests and never answers.
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
    end
  end)
end))
local port = server:getsockname().port

return {
  {
    ':CompactdAbort cancels a running compaction; the file is unchanged',
    function()
      local compactd = H.setup({
        summarizer = { kind = 'openai', model = 'slow/never' },
        providers = {
          slow = {
            kind = 'openai',
            baseUrl = ('http://127.0.0.1:%d/v1'):format(port),
            apiKey = 'not-a-real-key',
            models = { never = { contextWindow = 200000 } },
          },
        },
        retry = { enabled = false },
      })
      local demo = H.demo_copy('abort.jsonl')
      local err = H.run('CompactdOpen ' .. demo, 'open')
      H.eq(nil, err, 'open error')
      local bytes = table.concat(vim.fn.readfile(demo, 'b'), '\n')

      local outcome
      compactd.compact(nil, function(e, r)
        outcome = { err = e, result = r }
      end)
      H.wait('the summarizer request', function()
        return requests > 0
      end)
      H.eq(nil, outcome, 'compaction finished before the abort')

      local aborted
      compactd.abort(function(e, r)
        aborted = { err = e, result = r }
      end)
      H.wait('the abort', function()
        return aborted ~= nil and outcome ~= nil
      end)
      H.eq(nil, aborted.err, 'abort error')
      H.eq(true, aborted.result.aborted, 'aborted')
      H.eq('cancelled', outcome.err and outcome.err.data and outcome.err.data.kind, 'compaction error kind')
      H.eq(bytes, table.concat(vim.fn.readfile(demo, 'b'), '\n'), 'session file')

      local token
      for _, p in ipairs(H.progress) do
        if p.kind == 'begin' then
          token = p.token
        end
      end
      local kinds = H.progress_kinds(H.truthy(token, 'progress token'))
      H.eq('end', kinds[#kinds], 'progress ended')
      for _, c in ipairs(connections) do
        c:close()
      end
      server:close()
    end,
  },
}
