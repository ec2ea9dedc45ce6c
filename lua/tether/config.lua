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
  -- Where the server keeps sessions, so conversations outlive Neovim and the server: 'sqlite'
  -- (the user's SQLite file, $XDG_DATA_HOME/tether/sessions.db), 'memory', a database URL, or
  -- false to leave it to the server's configuration. It is sent only when neither your
  -- config.toml ([sessions] store), TETHER_SESSIONS_STORE nor init_options.sessions.store sets it.
  store = 'sqlite',
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
    yank = { n = 'gy' }, -- in a code block of an answer: yank it (into the register given, "x gy)
    open = { n = 'go' }, -- on a task call: open its sub-agent's session
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

--- The user's tether config.toml, as the server finds it.
function M.user_config_file()
  local xdg = vim.env.XDG_CONFIG_HOME
  if xdg and xdg:sub(1, 1) == '/' then
    return xdg .. '/tether/config.toml'
  end
  return vim.env.HOME and (vim.env.HOME .. '/.config/tether/config.toml') or nil
end

--- Whether a config.toml sets the session store: `store = ...` in its [sessions] table, or a
--- `sessions.store` / `sessions = { store = ... }` key (a line-by-line reading, not a TOML parser).
function M.file_sets_store(path)
  if not path or vim.fn.filereadable(path) == 0 then
    return false
  end
  local table_name = ''
  for _, line in ipairs(vim.fn.readfile(path)) do
    local name = line:match('^%s*%[%s*([%w_.%-]+)%s*%]')
    if name then
      table_name = name
    elseif line:match('^%s*store%s*=') and table_name == 'sessions' then
      return true
    elseif line:match('^%s*sessions%s*%.%s*store%s*=') or line:match('^%s*sessions%s*=%s*{.*store%s*=') then
      return table_name == ''
    end
  end
  return false
end

--- The store to ask the server for, or nil when the user's configuration decides.
function M.store()
  local store = M.options.store
  local overlay = M.options.init_options or {}
  if not store or (type(overlay.sessions) == 'table' and overlay.sessions.store ~= nil) then
    return nil
  end
  if (vim.env.TETHER_SESSIONS_STORE or '') ~= '' or M.file_sets_store(M.user_config_file()) then
    return nil
  end
  return store
end

--- initializationOptions: init_options, with `provider`, the session store (see `store`) and,
--- unless set there, `tools.approval` (so the server itself applies 'auto' or 'deny', and still
--- asks about protected paths).
function M.init_options()
  local overlay = vim.deepcopy(M.options.init_options or {})
  local store = M.store()
  if store then
    overlay.sessions = overlay.sessions or {}
    overlay.sessions.store = store
  end
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
