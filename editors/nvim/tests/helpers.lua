-- Shared setup for the plugin tests: a temp home for the daemon, a cwd, stubbed pickers,
-- progress recording, session-file reading and waiting on conditions (never fixed sleeps).
local H = {}

H.root = vim.fn.fnamemodify(debug.getinfo(1, 'S').source:sub(2), ':p:h:h:h:h')
H.bin = vim.env.COMPACTD_BIN or (H.root .. '/target/debug/compactd')
H.tmp = vim.fn.tempname()
H.cwd = H.tmp .. '/project'
vim.fn.mkdir(H.cwd, 'p')
vim.fn.mkdir(H.tmp .. '/config', 'p')
vim.fn.chdir(H.cwd)

--- Every `$/progress` seen through the `LspProgress` autocmd, with `vim.lsp.status()` then.
H.progress = {}
vim.api.nvim_create_autocmd('LspProgress', {
  group = vim.api.nvim_create_augroup('compactd_tests', { clear = true }),
  callback = function(ev)
    local params = ev.data.params
    H.progress[#H.progress + 1] = {
      token = params.token,
      kind = params.value.kind,
      title = params.value.title,
      message = params.value.message,
      status = vim.lsp.status(),
    }
  end,
})

--- Progress kinds seen for one token, in order.
function H.progress_kinds(token)
  local kinds = {}
  for _, p in ipairs(H.progress) do
    if p.token == token then
      kinds[#kinds + 1] = p.kind
    end
  end
  return kinds
end

--- `vim.ui.select` answers: each call pops a chooser `fun(items, opts) -> item?`.
H.choosers = {}
H.select_calls = {}
vim.ui.select = function(items, opts, on_choice)
  local chooser = table.remove(H.choosers, 1)
  assert(chooser, 'unexpected vim.ui.select: ' .. tostring(opts.prompt))
  local shown = {}
  for i, item in ipairs(items) do
    shown[i] = opts.format_item and opts.format_item(item) or tostring(item)
  end
  H.select_calls[#H.select_calls + 1] = { prompt = opts.prompt, shown = shown }
  local choice = chooser(items, opts)
  vim.schedule(function()
    on_choice(choice)
  end)
end
H.inputs = {}
vim.ui.input = function(_, on_confirm)
  local text = table.remove(H.inputs, 1)
  vim.schedule(function()
    on_confirm(text)
  end)
end

--- Messages the plugin showed with `vim.notify`, recorded instead of printed.
H.notes = {}
vim.notify = function(msg, level)
  H.notes[#H.notes + 1] = { msg = msg, level = level }
end

--- Waits until `cond()` is truthy or fails after `ms` (default 30 s).
function H.wait(what, cond, ms)
  local ok = vim.wait(ms or 30000, cond, 20)
  assert(ok, 'timed out waiting for ' .. what)
end

--- Runs an ex command and waits for the plugin to record its outcome; returns `err, result`.
function H.run(command, name, ms)
  local compactd = require('compactd')
  compactd.state.last = nil
  vim.cmd(command)
  H.wait(command, function()
    return compactd.state.last ~= nil and compactd.state.last.command == name
  end, ms)
  return compactd.state.last.err, compactd.state.last.result
end

--- The entries of a session file (header excluded).
function H.entries(path)
  local out = {}
  for _, line in ipairs(vim.fn.readfile(path)) do
    if line ~= '' then
      local e = vim.json.decode(line)
      if e.type ~= 'session' then
        out[#out + 1] = e
      end
    end
  end
  return out
end

function H.eq(expected, actual, what)
  if not vim.deep_equal(expected, actual) then
    error(('%s: expected %s, got %s'):format(what or 'value', vim.inspect(expected), vim.inspect(actual)), 2)
  end
end

function H.truthy(v, what)
  if not v then
    error((what or 'value') .. ' is falsy', 2)
  end
  return v
end

--- Starts the plugin against the built daemon with a temp home and the extractive summarizer.
function H.setup(settings)
  assert(vim.fn.executable(H.bin) == 1, 'build the daemon first: ' .. H.bin)
  local compactd = require('compactd')
  compactd.setup({
    cmd = { H.bin, 'serve', '--log-file', H.tmp .. '/daemon.log' },
    cmd_env = {
      COMPACTD_CONFIG_DIR = H.tmp .. '/config',
      COMPACTD_DATA_DIR = H.tmp .. '/data',
    },
    settings = vim.tbl_deep_extend('force', {
      summarizer = { kind = 'extractive' },
      branchSummary = { enabled = true },
    }, settings or {}),
  })
  H.wait('the daemon to initialize', function()
    return compactd.state.ready
  end)
  return compactd
end

--- A copy of the bundled demo session in the temp dir.
function H.demo_copy(name)
  local path = H.tmp .. '/' .. (name or 'demo.jsonl')
  vim.fn.writefile(vim.fn.readfile(H.root .. '/examples/demo-session.jsonl'), path)
  return path
end

function H.teardown()
  local compactd = package.loaded['compactd']
  if compactd and compactd.state.client_id then
    local id = compactd.state.client_id
    compactd.stop()
    vim.wait(10000, function()
      return vim.lsp.get_client_by_id(id) == nil
    end, 20)
  end
end

return H
