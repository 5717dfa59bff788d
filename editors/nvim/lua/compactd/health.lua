--- `:checkhealth compactd`: Neovim version, the daemon binary, the running client, the session.
local M = {}

function M.check()
  local health = vim.health
  local compactd = require('compactd')
  health.start('compactd')

  if vim.fn.has('nvim-0.10') == 1 then
    health.ok('Neovim ' .. tostring(vim.version()))
  else
    health.error('Neovim 0.10 or newer is required')
  end

  local opts = compactd.state.opts or compactd.defaults
  local exe = opts.cmd[1]
  if vim.fn.executable(exe) == 1 then
    local out = vim.fn.system({ exe, '--version' })
    if vim.v.shell_error == 0 then
      health.ok(('daemon: %s (%s)'):format(vim.fn.exepath(exe), vim.trim(out)))
    else
      health.warn(('%s --version failed: %s'):format(exe, vim.trim(out)))
    end
  else
    health.error(('daemon not found: %s'):format(exe), {
      'Install it with `cargo install --path .` in the compactd repository',
      "or set `cmd` in require('compactd').setup{ cmd = { '/path/to/compactd', 'serve' } }",
    })
  end

  if not compactd.state.opts then
    health.warn("require('compactd').setup{} has not been called (defaults are used)")
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
