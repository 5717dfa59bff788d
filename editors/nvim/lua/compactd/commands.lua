--- The user commands (`:Compactd*`). Defined by plugin/compactd.lua at startup, and again by
--- `setup()`, so a plugin manager that adds this folder to 'runtimepath' late (lazy.nvim's
--- `config`, see lazy-spec.lua) still gets them. Defining them twice is harmless.
local M = {}

function M.define()
  local function cmd(name, fn, opts)
    vim.api.nvim_create_user_command(name, fn, opts or {})
  end

  cmd('CompactdCompact', function(a)
    require('compactd').compact(a.args)
  end, { nargs = '*', desc = 'Compact the current compactd session, with optional instructions' })
  cmd('CompactdPreview', function(a)
    require('compactd').preview(a.args)
  end, { nargs = '*', desc = 'Preview a compaction (nothing written) in an editable scratch buffer' })
  cmd('CompactdCommit', function()
    require('compactd').commit()
  end, { desc = "Write the preview buffer's compaction with the buffer's text as the summary" })
  cmd('CompactdDiscard', function()
    require('compactd').discard()
  end, { desc = 'Wipe the preview buffer; nothing is written' })
  cmd('CompactdUndo', function(a)
    require('compactd').undo(a.args)
  end, { nargs = '?', desc = "Undo the latest compaction (or the given one; an undo entry's id puts it back)" })
  cmd('CompactdTree', function()
    require('compactd').tree()
  end, { desc = 'Pick an entry of the session tree and move there' })
  cmd('CompactdFork', function()
    require('compactd').fork()
  end, { desc = 'Make a new session of the branch up to a picked entry (or of the whole session)' })
  cmd('CompactdAbort', function()
    require('compactd').abort()
  end, { desc = 'Abort the running compaction or branch summary' })
  cmd('CompactdOpen', function(a)
    require('compactd').open(a.args)
  end, { nargs = '?', complete = 'file', desc = 'Open a compactd session (pick one of the cwd when no path)' })
  cmd('CompactdNew', function(a)
    require('compactd').new(a.args)
  end, { nargs = '*', desc = 'Create a compactd session for the cwd' })
  cmd('CompactdStatus', function()
    require('compactd').status()
  end, { desc = 'Show the current session context usage' })
end

return M
