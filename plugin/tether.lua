-- Commands of the tether plugin. Everything else lives in lua/tether/ and loads on first use.
if vim.g.loaded_tether then
  return
end
vim.g.loaded_tether = true

-- The Tether* groups, linked to defaults, exist from the start (for colour schemes and :hi).
require('tether.highlights').setup()

local function tether()
  return require('tether')
end

vim.api.nvim_create_user_command('TetherNew', function(opts)
  tether().new_session(opts.args ~= '' and opts.args or nil)
end, { nargs = '?', desc = 'tether: start a new session' })

vim.api.nvim_create_user_command('TetherAsk', function(opts)
  local context
  if opts.range > 0 then
    context = { buf = vim.api.nvim_get_current_buf(), first = opts.line1, last = opts.line2 }
  end
  tether().ask(opts.args ~= '' and opts.args or nil, context)
end, { nargs = '*', range = true, desc = 'tether: ask the agent (a range adds the lines as context)' })

vim.api.nvim_create_user_command('TetherCancel', function()
  tether().cancel()
end, { desc = 'tether: cancel the running turn' })

vim.api.nvim_create_user_command('TetherSessions', function()
  tether().sessions()
end, { desc = 'tether: pick a session and open its transcript' })

vim.api.nvim_create_user_command('TetherFork', function(opts)
  tether().fork(opts.args ~= '' and opts.args or nil)
end, { nargs = '?', desc = 'tether: fork the current session' })

vim.api.nvim_create_user_command('TetherChat', function()
  tether().chat()
end, { desc = 'tether: open the chat buffer of the current session (a new session if none)' })

vim.api.nvim_create_user_command('TetherOpen', function(opts)
  tether().open_session(opts.args)
end, { nargs = '?', desc = 'tether: open a session (default: the sub-agent of the task call under the cursor)' })

vim.api.nvim_create_user_command('TetherUndo', function()
  tether().undo()
end, { desc = "tether: put back the files the session's last turn changed" })

vim.api.nvim_create_user_command('TetherMode', function(opts)
  tether().mode(opts.args ~= '' and opts.args or nil)
end, {
  nargs = '?',
  complete = function()
    return tether().modes
  end,
  desc = "tether: set the session's mode (ask, accept_edits, read_only)",
})

vim.api.nvim_create_user_command('TetherAdd', function(opts)
  if opts.bang then
    return tether().add(nil)
  elseif opts.args ~= '' then
    return tether().add({ path = opts.args })
  end
  local buf = vim.api.nvim_get_current_buf()
  if opts.range > 0 then
    return tether().add({ buf = buf, first = opts.line1, last = opts.line2 })
  end
  tether().add({ buf = buf })
end, {
  nargs = '?',
  range = true,
  bang = true,
  complete = 'file',
  desc = 'tether: add the buffer, the selected lines or a file to the next prompt (! clears)',
})

vim.api.nvim_create_user_command('TetherModel', function(opts)
  tether().model(opts.args ~= '' and opts.args or nil)
end, {
  nargs = '?',
  complete = function()
    return tether().models()
  end,
  desc = "tether: set the model of the session's next runs",
})
