-- Installing with lazy.nvim: the spec of editors/nvim/lazy-spec.lua (the README shows the same
-- table) run the way lazy.nvim runs a spec: its `build` function as a coroutine resumed until it
-- ends (lazy.nvim's tasks), with the plugin's directory (here the repository itself; lazy.nvim
-- would have cloned it), then `config(plugin, opts)`. lazy.nvim itself is not on a package
-- registry, so it is not part of the test. The build's cargo command is checked, then run with
-- `--debug` added so it reuses the test command's debug build instead of a release build (the
-- profile is the only difference), installing into a temp CARGO_INSTALL_ROOT. Then
-- `:checkhealth compactd`, the help file and its tags.
local H = require('helpers')

local spec = dofile(H.root .. '/editors/nvim/lazy-spec.lua')
local install_root = H.tmp .. '/cargo-install'

--- The lines of `:checkhealth compactd`.
local function checkhealth()
  vim.cmd('checkhealth compactd')
  local lines = vim.api.nvim_buf_get_lines(0, 0, -1, false)
  vim.cmd('bwipeout!')
  return table.concat(lines, '\n')
end

local function has(text, pattern, what)
  if not text:find(pattern) then
    error(('%s: %q not found in:\n%s'):format(what, pattern, text), 2)
  end
end

return {
  {
    'the README gives the spec of lazy-spec.lua',
    function()
      local readme = table.concat(vim.fn.readfile(H.root .. '/README.md'), '\n')
      local lines = vim.fn.readfile(H.root .. '/editors/nvim/lazy-spec.lua')
      local body = {}
      for _, line in ipairs(lines) do
        if not line:match('^%-%-') then
          body[#body + 1] = line
        end
      end
      local table_text = table.concat(body, '\n'):gsub('^return ', '')
      H.truthy(readme:find(table_text, 1, true), 'README.md contains the spec of editors/nvim/lazy-spec.lua')
      H.eq('function', type(spec.build), 'build step')
      H.eq(false, spec.lazy, 'loaded at startup')
    end,
  },
  {
    "the spec's build step installs the daemon",
    function()
      local real_system = vim.system
      local commands = {}
      vim.system = function(cmd, opts, on_exit)
        commands[#commands + 1] = vim.deepcopy(cmd)
        local env = { CARGO_INSTALL_ROOT = install_root, CARGO_TARGET_DIR = vim.env.CARGO_TARGET_DIR or (H.root .. '/target') }
        return real_system(vim.list_extend(vim.deepcopy(cmd), { '--debug' }), vim.tbl_extend('force', opts or {}, { env = env }), on_exit)
      end
      local task = coroutine.create(spec.build)
      local messages = {}
      local ok, msg = coroutine.resume(task, { dir = H.root, name = 'compactd' })
      while ok and coroutine.status(task) ~= 'dead' do
        messages[#messages + 1] = msg
        vim.wait(50)
        ok, msg = coroutine.resume(task)
      end
      vim.system = real_system
      H.truthy(ok, 'the build step failed: ' .. tostring(msg))
      H.eq({ { 'cargo', 'install', '--locked', '--path', H.root } }, commands, 'the build runs cargo install once')
      H.truthy(tostring(messages[1]):find('cargo install', 1, true), 'a progress message for lazy.nvim')
      H.eq(1, vim.fn.executable(install_root .. '/bin/compactd'), 'installed binary')
    end,
  },
  {
    "the spec's config makes the commands, :checkhealth compactd and :help work",
    function()
      for name in pairs(vim.api.nvim_get_commands({})) do
        if name:match('^Compactd') then
          vim.api.nvim_del_user_command(name)
        end
      end
      -- The installed daemon on PATH, as the build step leaves it (~/.cargo/bin).
      vim.env.PATH = install_root .. '/bin:' .. vim.env.PATH
      vim.env.COMPACTD_CONFIG_DIR = H.tmp .. '/config'
      vim.env.COMPACTD_DATA_DIR = H.tmp .. '/data'
      local compactd = require('compactd')
      spec.config({ dir = H.root, name = 'compactd' }, vim.deepcopy(spec.opts))
      H.wait('the daemon to initialize', function()
        return compactd.state.ready
      end)
      H.eq({ 'compactd', 'serve' }, compactd.state.opts.cmd, 'the default command')
      for _, name in ipairs({ 'CompactdOpen', 'CompactdNew', 'CompactdCompact', 'CompactdPreview', 'CompactdCommit', 'CompactdDiscard', 'CompactdUndo', 'CompactdTree', 'CompactdFork', 'CompactdAbort', 'CompactdStatus' }) do
        H.truthy(vim.api.nvim_get_commands({})[name], ':' .. name .. ' defined by setup()')
      end

      local report = checkhealth()
      has(report, 'OK.-daemon binary: ' .. vim.pesc(install_root .. '/bin/compactd') .. ' %(compactd %d+%.%d+%.%d+ %(commit ', 'binary and version')
      has(report, 'OK.-the daemon answers: compactd', 'daemon answers')
      has(report, 'OK.-settings valid', 'settings valid')
      has(report, 'OK.-daemon running: client', 'running client')
      H.truthy(not report:find('ERROR'), 'no error in:\n' .. report)

      vim.cmd('help :CompactdFork')
      H.truthy(vim.api.nvim_buf_get_name(0):match('editors/nvim/doc/compactd%.txt$'), ':help finds the help file')
      vim.cmd('helpclose')
    end,
  },
  {
    ':checkhealth compactd reports invalid settings with the key, and a missing binary',
    function()
      local compactd = require('compactd')
      compactd.stop()
      compactd.state.opts = vim.tbl_deep_extend('force', compactd.state.opts, {
        settings = { compaction = { reserveTokens = 'lots' } },
      })
      local report = checkhealth()
      has(report, 'ERROR.-settings invalid: .-compaction%.reserveTokens', 'invalid settings')

      compactd.state.opts.cmd = { H.tmp .. '/no-such-compactd', 'serve' }
      report = checkhealth()
      has(report, 'ERROR.-daemon not found', 'missing binary')
      has(report, 'cargo install', 'advice')
    end,
  },
  {
    'the help file is current: its tags match :helptags, every command has a tag',
    function()
      local doc = H.root .. '/editors/nvim/doc'
      local copy = H.tmp .. '/doc'
      vim.fn.mkdir(copy, 'p')
      vim.fn.writefile(vim.fn.readfile(doc .. '/compactd.txt'), copy .. '/compactd.txt')
      vim.cmd.helptags(vim.fn.fnameescape(copy))
      H.eq(vim.fn.readfile(copy .. '/tags'), vim.fn.readfile(doc .. '/tags'), 'doc/tags (regenerate: :helptags editors/nvim/doc)')
      local tags = table.concat(vim.fn.readfile(doc .. '/tags'), '\n')
      for name in pairs(vim.api.nvim_get_commands({})) do
        if name:match('^Compactd') then
          H.truthy(tags:find(':' .. name .. '\t', 1, true), ':help :' .. name)
        end
      end
      H.truthy(tags:find('compactd-health\t', 1, true), ':help compactd-health')
      H.truthy(tags:find('compactd-lazy\t', 1, true), ':help compactd-lazy')
    end,
  },
}
