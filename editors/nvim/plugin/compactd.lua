-- User commands of compactd; the daemon starts on first use if setup() did not start it.
if vim.g.loaded_compactd then
  return
end
vim.g.loaded_compactd = true
require('compactd.commands').define()
