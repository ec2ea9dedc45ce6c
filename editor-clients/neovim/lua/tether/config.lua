-- Configuration: require('tether').setup{ cmd = {...}, provider = {...}, approval = ... }
local M = {}

M.defaults = {
  -- The server command (a list, as for vim.system / vim.lsp.rpc.start).
  cmd = { 'python3', '-P', '-m', 'tether', 'serve' }, -- -P: the workspace is not on sys.path
  -- Working directory of the server; nil is Neovim's current directory.
  cwd = nil,
  -- Provider settings, sent as initializationOptions.provider (nil: the server's own config).
  provider = nil,
  -- Any other configuration overlay for initializationOptions (same keys as the config file).
  init_options = nil,
  -- How to answer tool/requestPermission: 'ask' (vim.ui.select), 'allow' or 'reject'.
  approval = 'ask',
  -- Report run progress through vim.notify.
  notify = true,
}

M.options = vim.deepcopy(M.defaults)

function M.setup(opts)
  M.options = vim.tbl_deep_extend('force', vim.deepcopy(M.defaults), opts or {})
  -- Lists are replaced, not merged.
  if opts and opts.cmd then
    M.options.cmd = vim.deepcopy(opts.cmd)
  end
  local approval = M.options.approval
  if approval ~= 'ask' and approval ~= 'allow' and approval ~= 'reject' then
    error("tether: approval must be 'ask', 'allow' or 'reject'")
  end
  return M.options
end

function M.init_options()
  local overlay = vim.deepcopy(M.options.init_options or {})
  if M.options.provider then
    overlay.provider = vim.deepcopy(M.options.provider)
  end
  return overlay
end

return M
