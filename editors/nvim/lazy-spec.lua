-- compactd for lazy.nvim: this table is the spec the README's "Install" gives (replace
-- OWNER/compactd with where your copy of the repository lives, or use `dir = "/path/to/compactd"`).
-- The build step installs the daemon with cargo (into ~/.cargo/bin, which must be on PATH); the
-- plugin is the repository's editors/nvim folder, added to 'runtimepath' by `config`.
-- editors/nvim/tests/test_install.lua runs this build and config the way lazy.nvim does.
return {
  'OWNER/compactd',
  lazy = false,
  build = 'cargo install --locked --path .',
  config = function(plugin, opts)
    vim.opt.runtimepath:append(plugin.dir .. '/editors/nvim')
    require('compactd').setup(opts)
  end,
  opts = {
    settings = { summarizer = { kind = 'extractive' } },
  },
}
