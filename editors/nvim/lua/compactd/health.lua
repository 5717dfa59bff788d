--- `:checkhealth compactd`: Neovim version, the daemon binary and its version, a daemon that
--- answers `initialize` with this setup's settings (so invalid settings show here, with the
--- key at fault), the running client and the current session.
local M = {}

--- Starts `cmd` once, sends `initialize` (with `settings`) as newline-delimited JSON and closes
--- its stdin, and returns the decoded `initialize` answer, or nil and what went wrong. At EOF the
--- daemon answers what is in flight and exits; an `exit` notification would instead cancel an
--- `initialize` still running.
--- @return table? answer, string? problem
local function probe(cmd, env, settings)
  local init = {
    jsonrpc = '2.0',
    id = 1,
    method = 'initialize',
    params = {
      processId = vim.NIL,
      clientInfo = { name = 'checkhealth' },
      capabilities = vim.empty_dict(),
      initializationOptions = settings and { settings = settings } or nil,
    },
  }
  local input = vim.json.encode(init) .. '\n'
  local ok, proc = pcall(vim.system, cmd, { stdin = input, text = true, env = env })
  if not ok then
    return nil, tostring(proc)
  end
  local done = proc:wait(10000)
  if done.signal ~= 0 and done.code ~= 0 and (done.stdout or '') == '' then
    return nil, ('no answer within 10 s (exit %s, signal %s)'):format(done.code, done.signal)
  end
  for line in vim.gsplit(done.stdout or '', '\n', { trimempty = true }) do
    local decoded_ok, msg = pcall(vim.json.decode, line)
    if decoded_ok and type(msg) == 'table' and msg.id == 1 then
      return msg
    end
  end
  return nil, ('no initialize answer on stdout; stderr: %s'):format(vim.trim(done.stderr or ''))
end

function M.check()
  local health = vim.health
  local compactd = require('compactd')
  health.start('compactd')

  if vim.fn.has('nvim-0.10') == 1 then
    health.ok('Neovim ' .. tostring(vim.version()))
  else
    health.error('Neovim 0.10 or newer is required')
  end

  if not compactd.state.opts then
    health.warn("require('compactd').setup{} has not been called (defaults are used)")
  end
  local opts = compactd.state.opts or compactd.defaults
  local exe = opts.cmd[1]
  if vim.fn.executable(exe) ~= 1 then
    health.error(('daemon not found: %s'):format(exe), {
      'Install it with `cargo install --locked --path .` in the compactd repository (the lazy.nvim spec does this as its build step)',
      "or set `cmd` in require('compactd').setup{ cmd = { '/path/to/compactd', 'serve' } }",
    })
    return
  end
  local path = vim.fn.exepath(exe)
  local version = vim.trim(vim.fn.system({ exe, '--version' }))
  if vim.v.shell_error == 0 and version:match('^compactd %d+%.%d+%.%d+') then
    health.ok(('daemon binary: %s (%s)'):format(path, version))
  else
    health.error(('%s --version failed or is not compactd: %s'):format(path, version))
    return
  end

  local answer, problem = probe(opts.cmd, opts.cmd_env, opts.settings)
  if not answer then
    health.error('the daemon does not answer: ' .. problem)
  elseif answer.error then
    local kind = type(answer.error.data) == 'table' and answer.error.data.kind or nil
    if kind == 'settingsInvalid' then
      health.ok('the daemon answers')
      health.error('settings invalid: ' .. answer.error.message, {
        "Fix `settings` in require('compactd').setup{}, or the settings files (see schema/settings.schema.json)",
      })
    else
      health.error(('the daemon answers initialize with an error: %s'):format(answer.error.message))
    end
  else
    local info = answer.result and answer.result.serverInfo or {}
    health.ok(('the daemon answers: %s %s, protocol %s'):format(
      info.name or '?',
      info.version or '?',
      tostring(answer.result and answer.result.capabilities and answer.result.capabilities.protocolVersion)
    ))
    health.ok('settings valid (defaults, settings files and this setup)')
  end

  local client = compactd.state.client_id and vim.lsp.get_client_by_id(compactd.state.client_id)
  if client then
    local info = client.server_info or {}
    health.ok(('daemon running: client %d, %s %s'):format(client.id, info.name or '?', info.version or ''))
  else
    health.info('daemon not running (it starts on setup or on the first command)')
  end

  local s = compactd.state.session
  if s then
    health.ok(('current session %s: %s'):format(s.sessionId, s.path))
  else
    health.info('no current session (:CompactdOpen)')
  end
end

return M
