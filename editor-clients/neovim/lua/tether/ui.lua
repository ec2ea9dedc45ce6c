-- The session UI: one scratch buffer per session, streamed text appended as it arrives and one
-- line per tool call whose status is updated in place (with the diff of an edit under it).
local M = {}

local views = {} -- sessionId -> view
local diff_ns = vim.api.nvim_create_namespace('tether_diff')

local function set_lines(view, first, last, lines)
  local buf = view.buf
  if not vim.api.nvim_buf_is_valid(buf) then
    return
  end
  vim.bo[buf].modifiable = true
  vim.api.nvim_buf_set_lines(buf, first, last, false, lines)
  vim.bo[buf].modifiable = false
  for _, win in ipairs(vim.fn.win_findbuf(buf)) do
    vim.api.nvim_win_set_cursor(win, { vim.api.nvim_buf_line_count(buf), 0 })
  end
end

local function append(view, lines)
  local count = vim.api.nvim_buf_line_count(view.buf)
  local only = count == 1 and vim.api.nvim_buf_get_lines(view.buf, 0, 1, false)[1] == ''
  if only then
    set_lines(view, 0, 1, lines)
  else
    set_lines(view, count, count, lines)
  end
  view.text_open = false
end

--- The view of a session, its buffer created (and shown) if needed.
function M.view(session, show)
  local id = session.sessionId
  local view = views[id]
  if not view or not vim.api.nvim_buf_is_valid(view.buf) then
    local buf = vim.api.nvim_create_buf(false, true)
    vim.bo[buf].buftype = 'nofile'
    vim.bo[buf].bufhidden = 'hide'
    vim.bo[buf].swapfile = false
    vim.bo[buf].filetype = 'markdown'
    pcall(vim.api.nvim_buf_set_name, buf, 'tether://' .. id)
    view = { buf = buf, session = session, tools = {}, text_open = false }
    views[id] = view
    append(view, { '# tether: ' .. (session.title or id) })
  end
  if show and vim.fn.bufwinid(view.buf) == -1 then
    vim.cmd('botright split')
    vim.api.nvim_win_set_buf(0, view.buf)
  end
  return view
end

function M.get(session_id)
  local view = views[session_id]
  if view and vim.api.nvim_buf_is_valid(view.buf) then
    return view
  end
end

function M.prompt(view, text)
  local lines = { '' }
  for _, line in ipairs(vim.split(text, '\n', { plain = true })) do
    table.insert(lines, '> ' .. line)
  end
  table.insert(lines, '')
  append(view, lines)
end

--- Streamed text: the first piece continues the open text line, the rest become new lines.
function M.text(view, text)
  local parts = vim.split(text, '\n', { plain = true })
  local count = vim.api.nvim_buf_line_count(view.buf)
  if view.text_open then
    local last = vim.api.nvim_buf_get_lines(view.buf, count - 1, count, false)[1]
    parts[1] = last .. parts[1]
    set_lines(view, count - 1, count, parts)
  else
    set_lines(view, count, count, parts)
  end
  view.text_open = true
end

-- Tools that change something are marked with their kind.
local markers = { edit = '(edit) ', execute = '(execute) ' }

local function tool_line(tool)
  local line = string.format('  [%s] %s%s %s', tool.status, markers[tool.kind] or '', tool.name, tool.arguments or '')
  if tool.error then
    line = line .. ' — ' .. tool.error
  elseif tool.progress and tool.status == 'in_progress' then
    line = line .. ' — ' .. tool.progress
  end
  return (line:gsub('\n', ' '))
end

local diff_groups = { ['+'] = 'DiffAdd', ['-'] = 'DiffDelete', ['@'] = 'DiffChange' }

--- The lines of a unified diff under the tool line (indented, highlighted as a diff); the rows of
--- the tool lines below it move down.
local function insert_diff(view, tool, diff)
  local lines = {}
  for _, line in ipairs(vim.split((diff:gsub('\n$', '')), '\n', { plain = true })) do
    table.insert(lines, '    ' .. line)
  end
  local first = tool.row + 1
  local open = view.text_open
  set_lines(view, first, first, lines)
  view.text_open = open
  for _, other in pairs(view.tools) do
    if other ~= tool and other.row >= first then
      other.row = other.row + #lines
    end
  end
  if not vim.api.nvim_buf_is_valid(view.buf) then
    return
  end
  for i, line in ipairs(lines) do
    local c = line:sub(5, 5)
    local group = diff_groups[c]
    if line:sub(5, 7) == '+++' or line:sub(5, 7) == '---' then
      group = 'DiffText'
    end
    if group then
      vim.api.nvim_buf_add_highlight(view.buf, diff_ns, group, first + i - 1, 0, -1)
    end
  end
end

---@class tether.ToolCallEvent
---@field toolCallId string
---@field name string
---@field arguments string
---@field toolKind? 'read'|'edit'|'execute'|'search'|'other'
---@field status string

---@class tether.ToolCallUpdateEvent
---@field toolCallId string
---@field status 'in_progress'|'completed'|'failed'|'cancelled'
---@field result? string
---@field error? string
---@field diff? string a unified diff of what an edit changed (with completed)
---@field progress? string a line the running tool reported (with in_progress)

---@param event tether.ToolCallEvent
function M.tool_call(view, event)
  local tool = {
    name = event.name,
    arguments = event.arguments,
    kind = event.toolKind,
    status = event.status or 'pending',
  }
  append(view, { tool_line(tool) })
  tool.row = vim.api.nvim_buf_line_count(view.buf) - 1
  view.tools[event.toolCallId] = tool
end

---@param event tether.ToolCallUpdateEvent
function M.tool_update(view, event)
  local tool = view.tools[event.toolCallId]
  if not tool then
    return
  end
  tool.status = event.status
  tool.error = event.error
  if event.progress then
    tool.progress = event.progress
  end
  local open = view.text_open
  set_lines(view, tool.row, tool.row + 1, { tool_line(tool) })
  view.text_open = open
  if event.diff and event.diff ~= '' then
    insert_diff(view, tool, event.diff)
  end
end

function M.finished(view, result)
  local line = '-- ' .. (result.stopReason or 'done')
  if result.iterations then
    line = line .. string.format(' (%d iteration%s)', result.iterations, result.iterations == 1 and '' or 's')
  end
  append(view, { '', line })
end

function M.error(view, err)
  append(view, { '', '-- error ' .. tostring(err.code) .. ': ' .. tostring(err.message) })
end

--- A transcript from session/messages.
function M.transcript(view, messages)
  for _, message in ipairs(messages) do
    local content = message.content
    if type(content) == 'table' then
      local texts = {}
      for _, block in ipairs(content) do
        table.insert(texts, block.text or block.uri or ('[' .. block.type .. ']'))
      end
      content = table.concat(texts, '\n')
    end
    if message.role == 'user' then
      M.prompt(view, content or '')
    elseif message.role == 'assistant' then
      if content and content ~= '' then
        M.text(view, content)
      end
      for _, call in ipairs(message.toolCalls or {}) do
        M.tool_call(view, { toolCallId = call.id, name = call.name, arguments = call.arguments, status = 'called' })
      end
    elseif message.role == 'tool' then
      local tool = view.tools[message.toolCallId]
      if tool then
        M.tool_update(view, { toolCallId = message.toolCallId, status = message.isError and 'failed' or 'completed' })
      end
    end
  end
end

return M
