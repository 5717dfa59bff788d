-- compactd for lazy.nvim: this table is the spec the README's "Install" gives (replace
-- OWNER/compactd with where your copy of the repository lives, or use `dir = "/path/to/compactd"`).
-- The build step installs the daemon with cargo (into ~/.cargo/bin, which must be on PATH). It is
-- a function, not a shell string: lazy.nvim kills build commands after its process timeout (two
-- minutes), shorter than a cold release build. The plugin is the repository's editors/nvim
-- folder, added to 'runtimepath' by `config`. editors/nvim/tests/test_install.lua runs this build
-- and config the way lazy.nvim does.
return {
  'OWNER/compactd',
  lazy = false,
  build = function(plugin)
    local done
    vim.system({ 'cargo', 'install', '--locked', '--path', plugin.dir }, { text = true }, function(result)
      done = result
    end)
    coroutine.yield('cargo install --locked --path . (a cold build takes 10-15 minutes)')
    while not done do
      coroutine.yield()
    end
    assert(done.code == 0, 'cargo install failed:\n' .. (done.stderr or ''))
  end,
  config = function(plugin, opts)
    vim.opt.runtimepath:append(plugin.dir .. '/editors/nvim')
    require('compactd').setup(opts)
  end,
  opts = {
    settings = { summarizer = { kind = 'extractive' } },
  },
}
