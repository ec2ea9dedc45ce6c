-- Configuration: require('tether').setup{ cmd = {...}, provider = {...}, approval = ... }
local M = {}

M.defaults = {
  -- The server command (a list, as for vim.system / jobstart).
  -- nil: `tether serve` when tether is on PATH, else the configured Python (see server_cmd).
  cmd = nil,
  -- Working directory of the server; nil is Neovim's current directory.
  cwd = nil,
  -- Provider settings, sent as initializationOptions.provider (nil: the server's own config).
  provider = nil,
  -- Any other configuration overlay for initializationOptions (same keys as the config file).
  init_options = nil,
  -- Tools that write or run something: 'ask' (a prompt for each call), 'auto' (run them without
  -- asking) or 'deny' (refuse them) — tether's `tools.approval`.
  approval = 'ask',
  -- Report run progress through vim.notify.
  notify = true,
  -- Keys of the chat buffer (a list of keys, a single key, or false to leave it unmapped).
  keymaps = {
    send = { n = '<CR>', i = '<C-s>' }, -- send the prompt area
    cancel = { n = '<C-c>' }, -- cancel the running turn
    restore = { n = 'gR' }, -- on a prompt line: put back its turn's files, the conversation, or both
  },
}

-- Values of `approval` older versions took, and what they mean now.
local renamed = { allow = 'auto', reject = 'deny' }

M.options = vim.deepcopy(M.defaults)

local function deprecated(old, new)
  vim.schedule(function()
    vim.notify(string.format("tether: approval = '%s' is deprecated; use '%s'", old, new), vim.log.levels.WARN)
  end)
end

-- The server command: `cmd` when set, else `tether serve` when tether is on PATH (where
-- `uv tool install` and `pipx install` put it), else `-m tether serve` with the configured Python
-- (g:python3_host_prog, else python3; -P: the workspace is not on sys.path).
function M.server_cmd()
  if M.options.cmd then
    return M.options.cmd
  end
  if vim.fn.executable('tether') == 1 then
    return { 'tether', 'serve' }
  end
  return { vim.g.python3_host_prog or 'python3', '-P', '-m', 'tether', 'serve' }
end

function M.setup(opts)
  M.options = vim.tbl_deep_extend('force', vim.deepcopy(M.defaults), opts or {})
  -- Lists are replaced, not merged.
  if opts and opts.cmd then
    M.options.cmd = vim.deepcopy(opts.cmd)
  end
  local approval = M.options.approval
  if renamed[approval] then
    deprecated(approval, renamed[approval])
    M.options.approval = renamed[approval]
  elseif approval ~= 'ask' and approval ~= 'auto' and approval ~= 'deny' then
    error("tether: approval must be 'ask', 'auto' or 'deny'")
  end
  return M.options
end

--- initializationOptions: init_options, with `provider` and, unless set there, `tools.approval`
--- (so the server itself applies 'auto' or 'deny', and still asks about protected paths).
function M.init_options()
  local overlay = vim.deepcopy(M.options.init_options or {})
  if M.options.provider then
    overlay.provider = vim.deepcopy(M.options.provider)
  end
  if M.options.approval ~= 'ask' then
    overlay.tools = overlay.tools or {}
    if overlay.tools.approval == nil then
      overlay.tools.approval = M.options.approval
    end
  end
  return overlay
end

return M
