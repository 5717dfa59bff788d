-- Headless test runner for the compactd Neovim plugin.
--
--   COMPACTD_BIN=target/debug/compactd nvim --headless -u NONE -l editors/nvim/tests/run.lua [file ...]
--
-- Runs every `tests/test_*.lua` (or the files given). Each file returns a list of
-- `{ name, fn }` run in order against one daemon; a test fails by raising an error. Prints one
-- line per test and a closing `N passed, N failed` line; exits non-zero on any failure.
local here = vim.fn.fnamemodify(debug.getinfo(1, 'S').source:sub(2), ':p:h')
local plugin_root = vim.fn.fnamemodify(here, ':h')
vim.opt.runtimepath:prepend(plugin_root)
package.path = here .. '/?.lua;' .. package.path

local files = {}
for _, a in ipairs(_G.arg or {}) do
  files[#files + 1] = vim.fn.fnamemodify(a, ':p')
end
if #files == 0 then
  files = vim.fn.glob(here .. '/test_*.lua', false, true)
  table.sort(files)
end

local passed, failed = 0, 0
for _, file in ipairs(files) do
  -- A fresh plugin and daemon per file.
  for name in pairs(package.loaded) do
    if name == 'compactd' or name:match('^compactd%.') or name == 'helpers' then
      package.loaded[name] = nil
    end
  end
  local ok_load, tests = pcall(dofile, file)
  if not ok_load then
    io.stdout:write(('FAIL %s (loading): %s\n'):format(file, tests))
    failed = failed + 1
    tests = {}
  end
  for _, t in ipairs(tests) do
    local started = vim.uv.hrtime()
    local ok, err = xpcall(t[2], debug.traceback)
    local ms = (vim.uv.hrtime() - started) / 1e6
    if ok then
      passed = passed + 1
      io.stdout:write(('ok   %s (%d ms)\n'):format(t[1], ms))
    else
      failed = failed + 1
      io.stdout:write(('FAIL %s (%d ms)\n%s\n'):format(t[1], ms, err))
    end
  end
  local h = package.loaded['helpers']
  if h then
    h.teardown()
  end
end
io.stdout:write(('%d passed, %d failed\n'):format(passed, failed))
io.stdout:flush()
os.exit(failed == 0 and passed > 0 and 0 or 1)
