-- The chat buffer of a session: the transcript on top (streamed text, `> ` prompt lines, one line
-- per tool call updated in place, its diff or output under it), then a separator line, then the
-- prompt area where the user types the next message.
--
-- Positions are extmarks, so text the user types (or deletes) anywhere does not misplace what the
-- server streams: the separator carries a mark whose row is the end of the transcript, and each
-- tool line carries one at its start (lines inserted before it move it down; rewriting the line
-- would move it to the next one, so it is put back after each rewrite).
local highlights = require('tether.highlights')

local M = {}

local views = {} -- sessionId -> view
local by_buf = {} -- buffer -> view
local ns = vim.api.nvim_create_namespace('tether_chat')
local diff_ns = vim.api.nvim_create_namespace('tether_diff')
local plan_ns = vim.api.nvim_create_namespace('tether_plan')

M.SEPARATOR = '──── prompt ──── <CR> send · <C-c> cancel ────'
local MAX_OUTPUT_LINES = 200
local fold_cache = {} -- buffer -> { tick, levels }

local function mark_row(view, id)
  local pos = vim.api.nvim_buf_get_extmark_by_id(view.buf, ns, id, {})
  return pos[1]
end

--- The row of the separator: the transcript is every line above it.
local function end_row(view)
  return mark_row(view, view.separator)
end

--- Keep the end of the transcript in sight in the windows the user is not working in.
local function follow(view)
  local current = vim.api.nvim_get_current_win()
  local last = vim.api.nvim_buf_line_count(view.buf)
  for _, win in ipairs(vim.fn.win_findbuf(view.buf)) do
    if win ~= current then
      vim.api.nvim_win_set_cursor(win, { last, 0 })
    end
  end
end

local function set_lines(view, first, last, lines)
  if not vim.api.nvim_buf_is_loaded(view.buf) then
    return false
  end
  vim.api.nvim_buf_set_lines(view.buf, first, last, false, lines)
  follow(view)
  return true
end

--- Lines added at the end of the transcript (a text line being streamed is closed by them).
local function append(view, lines)
  local row = end_row(view)
  set_lines(view, row, row, lines)
  view.text_open = false
  view.reasoning = nil
  return row
end

--- Folds of tool output, wrapped lines: local to the chat buffer in that window (:setlocal), so a
--- file opened later in the window does not inherit them.
local function set_window_options(win)
  vim.api.nvim_win_call(win, function()
    vim.opt_local.foldmethod = 'expr'
    vim.opt_local.foldexpr = "luaeval(\"require'tether.ui'.foldexpr(_A)\", v:lnum)"
    vim.opt_local.foldlevel = 0
    vim.opt_local.foldenable = true
    vim.opt_local.wrap = true
    vim.opt_local.linebreak = true
  end)
end

--- What a session is called in lists and headings: its title (the server titles a session after
--- its first prompt), else `new session` (nothing asked yet) and the end of its id (the start
--- of a UUIDv7 is a time, shared by sessions made together).
function M.name(session)
  if type(session.title) == 'string' and session.title ~= '' then
    return session.title
  end
  return 'new session ' .. session.sessionId:sub(-8)
end

local function create(session)
  local id = session.sessionId
  local buf = vim.api.nvim_create_buf(false, true)
  vim.bo[buf].buftype = 'nofile'
  vim.bo[buf].bufhidden = 'hide'
  vim.bo[buf].swapfile = false
  -- Its own filetype (syntax/tether-chat.vim includes markdown's): plugins for markdown buffers
  -- (previewers, linters, formatters) do not attach to it.
  highlights.setup()
  vim.bo[buf].filetype = 'tether-chat'
  local name = 'tether://' .. id
  for _, old in ipairs(vim.api.nvim_list_bufs()) do
    -- The buffer :bdelete left behind (unloaded) still holds the name.
    if old ~= buf and vim.api.nvim_buf_get_name(old) == name and not vim.api.nvim_buf_is_loaded(old) then
      pcall(vim.api.nvim_buf_delete, old, { force = true })
    end
  end
  pcall(vim.api.nvim_buf_set_name, buf, name)
  local heading = '# tether: ' .. M.name(session)
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, { heading, M.SEPARATOR, '' })
  local view = { buf = buf, session = session, tools = {}, prompts = {}, text_open = false }
  view.separator = vim.api.nvim_buf_set_extmark(buf, ns, 1, 0, { hl_group = 'TetherSeparator', end_col = #M.SEPARATOR })
  views[id] = view
  by_buf[buf] = view
  local group = vim.api.nvim_create_augroup('tether_chat_' .. buf, { clear = true })
  vim.api.nvim_create_autocmd('BufWinEnter', {
    group = group,
    buffer = buf,
    callback = function()
      set_window_options(vim.api.nvim_get_current_win())
    end,
  })
  -- :bdelete unloads the buffer (its lines are gone): forget it, so reopening the session builds
  -- a new buffer from session/messages.
  vim.api.nvim_create_autocmd({ 'BufUnload', 'BufWipeout' }, {
    group = group,
    buffer = buf,
    callback = function()
      by_buf[buf] = nil
      fold_cache[buf] = nil
      if views[id] == view then
        views[id] = nil
      end
      view.gone = true
      pcall(vim.api.nvim_del_augroup_by_id, group)
    end,
  })
  if M.on_create then
    M.on_create(view)
  end
  return view
end

--- The view of a session, its buffer created (and shown, with show) if needed. The second value
--- is true when the buffer is new: its transcript is still to be filled in.
function M.view(session, show)
  local view = views[session.sessionId]
  local fresh = false
  if not view or not vim.api.nvim_buf_is_loaded(view.buf) then
    if view and vim.api.nvim_buf_is_valid(view.buf) then
      pcall(vim.api.nvim_buf_delete, view.buf, { force = true })
    end
    view = create(session)
    fresh = true
  end
  view.session = session
  if show and vim.fn.bufwinid(view.buf) == -1 then
    -- In a chat window, the session replaces the one shown there (a fork, a picked session).
    if not by_buf[vim.api.nvim_get_current_buf()] or by_buf[vim.api.nvim_get_current_buf()] == view then
      vim.cmd('botright split')
    end
    vim.api.nvim_win_set_buf(0, view.buf)
    set_window_options(0)
    vim.api.nvim_win_set_cursor(0, { vim.api.nvim_buf_line_count(view.buf), 0 })
  end
  return view, fresh
end

function M.get(session_id)
  local view = views[session_id]
  if view and vim.api.nvim_buf_is_loaded(view.buf) then
    return view
  end
end

function M.by_buffer(buf)
  local view = by_buf[buf]
  if view and vim.api.nvim_buf_is_loaded(view.buf) then
    return view
  end
end

--- The row (0-based) of the separator line: the prompt area is every line below it.
function M.separator_row(view)
  return end_row(view)
end

--- The text of the prompt area (below the separator), which is emptied.
function M.take_prompt(view)
  local row = end_row(view)
  local lines = vim.api.nvim_buf_get_lines(view.buf, row + 1, -1, false)
  local text = table.concat(lines, '\n'):gsub('^%s+', ''):gsub('%s+$', '')
  if text ~= '' then
    vim.api.nvim_buf_set_lines(view.buf, row + 1, -1, false, { '' })
  end
  return text
end

--- A prompt's `> ` lines. `message_id` is its message (session/messages' `id`); a live prompt
--- gets it from run_started (`set_prompt_id`). The restore key finds it from any of its lines.
function M.prompt(view, text, message_id)
  local lines = { '' }
  for _, line in ipairs(vim.split(text, '\n', { plain = true })) do
    table.insert(lines, '> ' .. line)
  end
  table.insert(lines, '')
  local row = append(view, lines)
  local mark = vim.api.nvim_buf_set_extmark(view.buf, ns, row + 1, 0, {})
  table.insert(view.prompts, { mark = mark, count = #lines - 2, message_id = message_id })
end

--- The id of the last prompt, once its run says it (`run_started.userMessageId`).
function M.set_prompt_id(view, message_id)
  local last = view.prompts[#view.prompts]
  if last and not last.message_id then
    last.message_id = message_id
  end
end

--- The message id of the prompt drawn on row (0-based), if that row is one of a prompt's lines.
function M.prompt_at(view, row)
  for _, prompt in ipairs(view.prompts) do
    local first = mark_row(view, prompt.mark)
    if row >= first and row < first + prompt.count then
      return prompt.message_id
    end
  end
end

--- The message ids of the prompt `message_id` and of every prompt after it, as a set.
function M.prompts_from(view, message_id)
  local ids, found = {}, false
  for _, prompt in ipairs(view.prompts) do
    found = found or prompt.message_id == message_id
    if found and prompt.message_id then
      ids[prompt.message_id] = true
    end
  end
  return ids
end

--- Empty the transcript (to draw it again from session/messages after a rewind of the history).
function M.clear(view)
  local row = end_row(view)
  vim.api.nvim_buf_clear_namespace(view.buf, diff_ns, 0, row)
  for _, item in pairs(view.tools) do
    vim.api.nvim_buf_del_extmark(view.buf, ns, item.mark)
  end
  for _, prompt in ipairs(view.prompts) do
    vim.api.nvim_buf_del_extmark(view.buf, ns, prompt.mark)
  end
  view.tools, view.prompts = {}, {}
  fold_cache[view.buf] = nil
  set_lines(view, 1, row, {})
  view.text_open = false
end

--- Streamed text: the first piece continues the open text line, the rest become new lines.
function M.text(view, text)
  view.reasoning = nil
  local parts = vim.split(text, '\n', { plain = true })
  local row = end_row(view)
  if view.text_open then
    local last = vim.api.nvim_buf_get_lines(view.buf, row - 1, row, false)[1] or ''
    parts[1] = last .. parts[1]
    set_lines(view, row - 1, row, parts)
  else
    set_lines(view, row, row, parts)
  end
  view.text_open = true
end

local PLAN_MARKS = { pending = '[ ]', in_progress = '[~]', completed = '[x]' }
local PLAN_HIGHLIGHTS = { pending = 'TetherPlanPending', in_progress = 'TetherPlanActive', completed = 'TetherPlanDone' }

--- The session's plan (update_plan): a checklist of virtual lines just above the separator, so
--- it stays above the prompt area and is never part of the text; replaced whole each time.
function M.plan(view, entries)
  if not vim.api.nvim_buf_is_loaded(view.buf) then
    return
  end
  vim.api.nvim_buf_clear_namespace(view.buf, plan_ns, 0, -1)
  if type(entries) ~= 'table' or #entries == 0 then
    return
  end
  local done = 0
  for _, entry in ipairs(entries) do
    if entry.status == 'completed' then
      done = done + 1
    end
  end
  local lines = { { { ('Plan · %d/%d done'):format(done, #entries), 'TetherPlanTitle' } } }
  for _, entry in ipairs(entries) do
    local content = tostring(entry.content):gsub('[%c]', ' ')
    local mark = PLAN_MARKS[entry.status] or '[?]'
    table.insert(lines, { { '  ' .. mark .. ' ' .. content, PLAN_HIGHLIGHTS[entry.status] or 'TetherPlanPending' } })
  end
  vim.api.nvim_buf_set_extmark(view.buf, plan_ns, end_row(view), 0, { virt_lines = lines, virt_lines_above = true })
end

--- The plan shown in the view, as text lines (for tests and :TetherPlan-like uses).
function M.plan_lines(view)
  local marks = vim.api.nvim_buf_get_extmarks(view.buf, plan_ns, 0, -1, { details = true })
  local lines = {}
  for _, mark in ipairs(marks) do
    for _, chunks in ipairs(mark[4].virt_lines or {}) do
      local line = ''
      for _, chunk in ipairs(chunks) do
        line = line .. chunk[1]
      end
      table.insert(lines, line)
    end
    table.insert(lines, 'row ' .. mark[2])
  end
  return lines
end

--- The title a person reads for a call, for calls that come without one (from session/messages):
--- the same wording as the server's tether/tools/titles.py.
function M.title(name, arguments)
  local ok, args = pcall(vim.json.decode, arguments or '', { luanil = { object = true, array = true } })
  if not ok or type(args) ~= 'table' then
    args = {}
  end
  local path = type(args.path) == 'string' and args.path ~= '' and args.path or '.'
  local command = args.command
  if type(command) == 'table' then
    command = table.concat(vim.tbl_map(tostring, command), ' ')
  elseif type(command) == 'string' then
    command = table.concat(vim.split(vim.trim(command), '%s+'), ' ')
  end
  local lines = ''
  if type(args.startLine) == 'number' and type(args.endLine) == 'number' then
    lines = string.format(' (lines %d-%d)', args.startLine, args.endLine)
  elseif type(args.startLine) == 'number' then
    lines = string.format(' (from line %d)', args.startLine)
  end
  local titles = {
    read_file = 'Read ' .. path .. lines,
    list_files = 'List ' .. path .. (type(args.glob) == 'string' and args.glob ~= '' and (' (' .. args.glob .. ')') or ''),
    search_text = string.format("Search '%s' in %s", tostring(args.pattern), path),
    write_file = 'Write ' .. path,
    edit_file = 'Edit ' .. path,
    run_command = 'Run ' .. ((command and command ~= '') and command or 'a command'),
  }
  if name == 'task' then
    local function given(value)
      return type(value) == 'string' and vim.trim(value) ~= '' and value or nil
    end
    local agent = given(args.agent) and (' (' .. args.agent .. ')') or ''
    local about = given(args.description) or given(args.prompt)
    titles.task = 'Task' .. agent .. (about and (': ' .. vim.split(vim.trim(about), '\n', { plain = true })[1]) or '')
  end
  local text = titles[name]
  if not text then
    local server, tool = (name or '?'):match('^(.-)__(.+)$')
    text = server and (server .. ': ' .. tool) or (name or '?')
  end
  return text
end

local function tool_line(tool)
  if tool.line then
    return tool.line
  end
  local line = string.format('  [%s] %s', tool.status, tool.title)
  if tool.error then
    line = line .. ' — ' .. (vim.split(tool.error, '\n', { plain = true })[1])
  elseif tool.progress and tool.status == 'in_progress' then
    line = line .. ' — ' .. tool.progress
  end
  return (line:gsub('\n', ' '))
end

local diff_groups = { ['+'] = 'TetherDiffAdd', ['-'] = 'TetherDiffDelete', ['@'] = 'TetherDiffChange' }

local function highlight_diff(view, first, lines)
  for i, line in ipairs(lines) do
    local group = diff_groups[line:sub(5, 5)]
    if line:sub(5, 7) == '+++' or line:sub(5, 7) == '---' then
      group = 'TetherDiffHeader'
    end
    if group then
      vim.api.nvim_buf_set_extmark(view.buf, diff_ns, first + i - 1, 0, { end_col = #line, hl_group = group })
    end
  end
end

--- Replace what is under a tool line: `diff` (a unified diff, shown) or `output` (folded).
local function set_body(view, tool, kind, text)
  local lines = {}
  if text and text ~= '' then
    for _, line in ipairs(vim.split((text:gsub('\n$', '')), '\n', { plain = true })) do
      table.insert(lines, '    ' .. line)
    end
  end
  if kind == 'output' and #lines > MAX_OUTPUT_LINES then
    local more = #lines - MAX_OUTPUT_LINES
    lines = vim.list_slice(lines, 1, MAX_OUTPUT_LINES)
    table.insert(lines, string.format('    … %d more line%s', more, more == 1 and '' or 's'))
  end
  local row = mark_row(view, tool.mark)
  local open = view.text_open
  local old_count = tool.body_count or 0
  -- Folds are computed as the lines change: the body is already what it is about to be.
  tool.body_kind, tool.body_count = kind, #lines
  fold_cache[view.buf] = nil
  set_lines(view, row + 1, row + 1 + old_count, lines)
  view.text_open = open
  if kind == 'diff' then
    highlight_diff(view, row + 1, lines)
  end
end

---@class tether.ToolCallEvent
---@field toolCallId string
---@field name string
---@field arguments string
---@field title? string what a person reads: `Read src/app.py`, `Run pytest -q`
---@field toolKind? 'read'|'edit'|'execute'|'search'|'other'
---@field status string
---@field diff? {path: string, oldText?: string, newText: string} an edit's proposed change

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
    title = event.title or M.title(event.name, event.arguments),
    kind = event.toolKind,
    status = event.status or 'pending',
  }
  local row = append(view, { tool_line(tool) })
  tool.mark = vim.api.nvim_buf_set_extmark(view.buf, ns, row, 0, {})
  view.tools[event.toolCallId] = tool
  return tool
end

-- Sub-agents: a `task` call's child run, drawn indented under the call's line -----------------

--- The lines of a call's sub-agent (without the body's indent): a heading naming its session
--- (what :TetherOpen takes), then its streamed text and its calls, each level indented further.
local function subagent_lines(sub)
  local lines = { 'sub-agent ' .. sub.session_id .. (sub.status and (' — ' .. sub.status) or '') }
  for _, entry in ipairs(sub.entries) do
    local indent = string.rep('  ', entry.depth - 1)
    if entry.kind == 'text' then
      for _, line in ipairs(vim.split(entry.text, '\n', { plain = true })) do
        table.insert(lines, indent .. line)
      end
    else
      local line = string.format('%s[%s] %s', indent, entry.status, entry.title)
      if entry.error then
        line = line .. ' — ' .. vim.split(entry.error, '\n', { plain = true })[1]
      end
      table.insert(lines, line)
    end
  end
  return lines
end

local function draw_subagent(view, tool, error)
  local lines = subagent_lines(tool.sub)
  if error and error ~= '' then
    vim.list_extend(lines, vim.split(error, '\n', { plain = true }))
  end
  set_body(view, tool, 'subagent', table.concat(lines, '\n'))
end

--- The sub-agent of the call `call_id` started, in session `session_id` (its first event).
function M.subagent(view, call_id, session_id)
  local tool = view.tools[call_id]
  if not tool or tool.sub then
    return
  end
  tool.child = session_id
  tool.sub = { session_id = session_id, entries = {}, calls = {} }
  draw_subagent(view, tool)
end

--- An event of the sub-agent (at `depth`: 1 for the call's own, 2 for its sub-agent's) under the
--- call `call_id`: streamed text, its calls and their status, its end.
function M.subagent_event(view, call_id, depth, run_id, event)
  local tool = view.tools[call_id]
  local sub = tool and tool.sub
  if not sub then
    return
  end
  local last = sub.entries[#sub.entries]
  if event.kind == 'message_delta' then
    if last and last.kind == 'text' and last.message_id == event.messageId then
      last.text = last.text .. event.text
    else
      table.insert(sub.entries, { kind = 'text', depth = depth, message_id = event.messageId, text = event.text })
    end
  elseif event.kind == 'tool_call' then
    local entry = { kind = 'tool', depth = depth, status = event.status or 'pending',
      title = event.title or M.title(event.name, event.arguments) }
    sub.calls[run_id .. ' ' .. event.toolCallId] = entry
    table.insert(sub.entries, entry)
  elseif event.kind == 'tool_call_update' then
    local entry = sub.calls[run_id .. ' ' .. event.toolCallId]
    if not entry then
      return
    end
    entry.status, entry.error = event.status, event.error
  elseif event.kind == 'run_finished' and depth == 1 then
    sub.status = event.stopReason
  else
    return
  end
  draw_subagent(view, tool)
end

--- The session of the sub-agent whose call's line (or its lines under it) is on row (0-based).
function M.child_at(view, row)
  for _, tool in pairs(view.tools) do
    if tool.child then
      local first = mark_row(view, tool.mark)
      if row >= first and row <= first + (tool.body_count or 0) then
        return tool.child
      end
    end
  end
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
  local row = mark_row(view, tool.mark)
  local open = view.text_open
  set_lines(view, row, row + 1, { tool_line(tool) })
  vim.api.nvim_buf_set_extmark(view.buf, ns, row, 0, { id = tool.mark })
  view.text_open = open
  if tool.sub then
    -- The sub-agent's lines stay (its answer, the call's result, is their last text).
    draw_subagent(view, tool, event.status ~= 'completed' and event.error or nil)
  elseif event.diff and event.diff ~= '' then
    set_body(view, tool, 'diff', event.diff)
  elseif event.status == 'completed' and event.result then
    set_body(view, tool, 'output', event.result)
  elseif event.status == 'failed' or event.status == 'cancelled' then
    set_body(view, tool, 'output', event.error)
  end
end

--- Streamed reasoning (`thought_delta`): a `  [reasoning]` line with the text folded under it,
--- closed by the answer's text or anything else added after it.
function M.thought(view, text)
  local block = view.reasoning
  if not block then
    local row = append(view, { '  [reasoning]' })
    view.reasoning_count = (view.reasoning_count or 0) + 1
    block = { line = '  [reasoning]', kind = 'reasoning', text = '',
      mark = vim.api.nvim_buf_set_extmark(view.buf, ns, row, 0, {}) }
    view.tools['reasoning:' .. view.reasoning_count] = block
  end
  block.text = block.text .. text
  set_body(view, block, 'output', block.text)
  view.reasoning = block
end

--- The diff an edit would make, shown under its tool line while the user decides.
function M.proposed_diff(view, call_id, diff)
  local tool = view.tools[call_id]
  if tool and diff and diff ~= '' then
    set_body(view, tool, 'diff', diff)
  end
end

--- The row of a call's tool line (0-based), or nil.
function M.tool_row(view, call_id)
  local tool = view.tools[call_id]
  return tool and mark_row(view, tool.mark)
end

--- What a run that was cut short says after its stop reason (and in a notification).
M.STOP_NOTES = {
  max_tokens = 'the answer was cut off at the model\'s output token limit',
  refusal = 'the model refused to answer',
}

--- The float that shows an edit's proposed change while its question is asked: at the top of the
--- editor, as tall as the diff but leaving `reserved` rows (the question's choices) and the
--- command line free at the bottom, so the question never covers it. Returns its window.
function M.show_proposal(title, diff, reserved)
  local lines = { title .. ' — proposed change' }
  for _, line in ipairs(vim.split((diff:gsub('\n$', '')), '\n', { plain = true })) do
    table.insert(lines, line)
  end
  local buf = vim.api.nvim_create_buf(false, true)
  vim.bo[buf].bufhidden = 'wipe'
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, lines)
  vim.bo[buf].modifiable = false
  vim.bo[buf].filetype = 'diff'
  local width = 20
  for _, line in ipairs(lines) do
    width = math.max(width, vim.fn.strdisplaywidth(line))
  end
  width = math.min(width, math.max(1, vim.o.columns - 4))
  -- The question below takes its prompt, its choices, the "Type number" line and the command line.
  local room = vim.o.lines - vim.o.cmdheight - (reserved or 0) - 5
  local height = math.max(1, math.min(#lines, room))
  local ok, win = pcall(vim.api.nvim_open_win, buf, false, {
    relative = 'editor',
    row = 0,
    col = math.max(0, vim.o.columns - width - 2),
    width = width,
    height = height,
    style = 'minimal',
    border = 'single',
    focusable = false,
    -- Under other floats (50): a vim.ui.select replacement that opens one stays usable.
    zindex = 45,
  })
  return ok and win or nil
end

function M.close_proposal(win)
  if win and vim.api.nvim_win_is_valid(win) then
    pcall(vim.api.nvim_win_close, win, true)
  end
end

function M.finished(view, result)
  local line = '-- ' .. (result.stopReason or 'done')
  if M.STOP_NOTES[result.stopReason] then
    line = line .. ': ' .. M.STOP_NOTES[result.stopReason]
  end
  local facts = {}
  if result.iterations then
    table.insert(facts, string.format('%d iteration%s', result.iterations, result.iterations == 1 and '' or 's'))
  end
  local usage = result.usage
  if usage and ((usage.inputTokens or 0) + (usage.outputTokens or 0)) > 0 then
    table.insert(facts, string.format('%d tokens in, %d out', usage.inputTokens or 0, usage.outputTokens or 0))
  end
  if #facts > 0 then
    line = line .. ' (' .. table.concat(facts, ', ') .. ')'
  end
  append(view, { '', line })
end

--- Replace the heading (the first line) with the session's name, e.g. once the server titled it.
function M.heading(view, name)
  if not vim.api.nvim_buf_is_loaded(view.buf) then
    return
  end
  local first = vim.api.nvim_buf_get_lines(view.buf, 0, 1, false)[1] or ''
  if first:sub(1, 8) == '# tether' then
    local open = view.text_open
    vim.api.nvim_buf_set_lines(view.buf, 0, 1, false, { '# tether: ' .. name })
    view.text_open = open
  end
end

--- A line from tether itself (not the model) at the end of the transcript.
function M.note(view, text)
  append(view, { '', '-- ' .. text })
end

function M.error(view, err)
  append(view, { '', '-- error ' .. tostring(err.code) .. ': ' .. tostring(err.message) })
end

local function content_text(content)
  if type(content) ~= 'table' then
    return content
  end
  local texts = {}
  for _, block in ipairs(content) do
    table.insert(texts, block.text or block.uri or ('[' .. tostring(block.type) .. ']'))
  end
  return table.concat(texts, '\n')
end

local CANCELLED_RESULT = 'cancelled' -- what a call that did not finish is given on cancel
local STOP_REASONS = {
  end_turn = true, max_iterations = true, max_tokens = true, refusal = true, cancelled = true,
  output_invalid = true,
}

--- The end line of a stored run, as ui.finished draws it live: its stop reason (the stored one
--- when the server keeps it, else what the messages show), its model calls and their tokens.
local function stored_run_end(run)
  local stop = run.recorded
    or (run.cancelled and 'cancelled')
    or (run.ended_with_calls and 'max_iterations')
    or 'end_turn'
  return { stopReason = stop, iterations = run.iterations, usage = run.usage }
end

local function new_run(id)
  return { id = id, iterations = 0, usage = { inputTokens = 0, outputTokens = 0 } }
end

local function add_to_run(run, message, metadata)
  if not run or message.kind == 'compaction' then
    return
  end
  run.iterations = run.iterations + 1
  local usage = type(metadata.usage) == 'table' and metadata.usage or {}
  run.usage.inputTokens = run.usage.inputTokens + (tonumber(usage.inputTokens) or 0)
  run.usage.outputTokens = run.usage.outputTokens + (tonumber(usage.outputTokens) or 0)
  run.cancelled = run.cancelled or metadata.cancelled == true
  if STOP_REASONS[metadata.stopReason] then
    run.recorded = metadata.stopReason
  end
  run.ended_with_calls = message.toolCalls ~= nil and #message.toolCalls > 0
end

--- A transcript from session/messages (oldest first), added to the transcript the way the live
--- turns drew it, from what the server keeps in the messages' metadata: each answer's reasoning
--- (folded), each call's kind, an edit's diff, a cancelled answer's partial text, and each run's
--- end line with its tokens.
function M.transcript(view, messages)
  local run
  local function close_run()
    if run and run.iterations > 0 then
      M.finished(view, stored_run_end(run))
    end
    run = nil
  end
  for _, message in ipairs(messages) do
    local content = content_text(message.content)
    local metadata = type(message.metadata) == 'table' and message.metadata or {}
    if message.runId ~= (run and run.id) and (message.runId or message.role == 'user') then
      close_run()
      run = message.runId and new_run(message.runId) or nil
    end
    if message.role == 'user' then
      M.prompt(view, content or '', message.id)
    elseif message.role == 'assistant' then
      add_to_run(run, message, metadata)
      if type(metadata.reasoning) == 'string' and metadata.reasoning ~= '' then
        M.thought(view, metadata.reasoning) -- folded under its line, as it streamed
        view.reasoning = nil
      end
      if content and content ~= '' then
        M.text(view, content)
      end
      local kinds = type(metadata.toolKinds) == 'table' and metadata.toolKinds or {}
      for _, call in ipairs(message.toolCalls or {}) do
        M.tool_call(view, { toolCallId = call.id, name = call.name, arguments = call.arguments,
          toolKind = kinds[call.id] or 'other', status = 'called' })
      end
    elseif message.role == 'tool' and view.tools[message.toolCallId] then
      local diff = type(metadata.diff) == 'string' and metadata.diff or nil
      -- A `task` call's result names its sub-agent's session (`output.sessionId`): the open key's.
      if type(message.output) == 'table' and type(message.output.sessionId) == 'string' then
        view.tools[message.toolCallId].child = message.output.sessionId
      end
      if message.isError and content == CANCELLED_RESULT then
        M.tool_update(view, { toolCallId = message.toolCallId, status = 'cancelled' })
      elseif message.isError then
        M.tool_update(view, { toolCallId = message.toolCallId, status = 'failed', error = content })
      else
        M.tool_update(view, { toolCallId = message.toolCallId, status = 'completed', result = content or '',
          diff = diff })
      end
    end
  end
  close_run()
end

--- Fold levels of a buffer: a tool's output is one fold under its tool line; a diff is not folded.

local function fold_levels(view)
  local tick = vim.api.nvim_buf_get_changedtick(view.buf)
  local cached = fold_cache[view.buf]
  if cached and cached.tick == tick then
    return cached.levels
  end
  local levels = {}
  for _, tool in pairs(view.tools) do
    if tool.body_kind == 'output' and (tool.body_count or 0) > 0 then
      local row = mark_row(view, tool.mark)
      levels[row + 2] = '>1'
      for lnum = row + 3, row + 1 + tool.body_count do
        levels[lnum] = '1'
      end
    end
  end
  fold_cache[view.buf] = { tick = tick, levels = levels }
  return levels
end

--- The code block (``` fences) around row (0-based) of the transcript: its lines, without the
--- fences, or nil when row is not in one.
function M.code_block_at(view, row)
  local lines = vim.api.nvim_buf_get_lines(view.buf, 0, end_row(view), false)
  local open
  for i, line in ipairs(lines) do
    if line:match('^%s*```') then
      if open then
        if row >= open - 1 and row <= i - 1 then
          return vim.list_slice(lines, open + 1, i - 1)
        end
        open = nil
      else
        open = i
      end
    end
  end
end

--- 'foldexpr' of the chat windows.
function M.foldexpr(lnum)
  local view = by_buf[vim.api.nvim_get_current_buf()]
  if not view then
    return '0'
  end
  return fold_levels(view)[lnum] or '0'
end

return M
