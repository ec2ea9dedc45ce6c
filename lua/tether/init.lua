-- tether for Neovim: sessions with the tether agent server, each in a chat buffer.
local config = require('tether.config')
local rpc = require('tether.rpc')
local ui = require('tether.ui')

local M = {}

local state = {
  client = nil, -- the rpc client, once started
  starting = nil, -- callbacks waiting for initialize
  session = nil, -- the current Session
  runs = {}, -- sessionId -> true while a kernel/run is going
  prompts = {}, -- request id -> a permission question waiting for the user's answer
  workspaces = {}, -- sessionId -> the workspace of a session that ran here (to reload its files)
  edits = {}, -- toolCallId -> the path an edit call of a running turn writes
  run_views = {}, -- runId -> { view, call_id, depth }: where a running run (or sub-agent) is drawn
  context = {}, -- what :TetherAdd added for the next prompt: { label, text }
}
M._state = state

local luanil = { luanil = { object = true, array = true } }
local SESSION_NOT_FOUND = -32010 -- the error of a request about a session the server does not have

local function notify(msg, level)
  vim.notify('tether: ' .. msg, level or vim.log.levels.INFO)
end

local function progress(msg)
  if config.options.notify then
    notify(msg)
  end
end

function M.setup(opts)
  config.setup(opts)
end

-- Permission questions ------------------------------------------------------------------------

-- The shared vocabulary of every tether front end.
local choices = {
  { label = 'Allow', outcome = 'allow' },
  { label = 'Always allow', outcome = 'allow_always' },
  { label = 'Reject', outcome = 'reject' },
  { label = 'Always reject', outcome = 'reject_always' },
}

--- The modes a session runs in (session/configure {mode}).
M.modes = { 'ask', 'accept_edits', 'read_only' }

--- Stop waiting for a question the server withdrew (the run was cancelled or ended): it is
--- answered -32800 (the server ignores that) and the user's later choice does nothing.
local function withdraw(prompt)
  if prompt.done then
    return
  end
  prompt.done = true
  state.prompts[prompt.id] = nil
  ui.close_proposal(prompt.float)
  prompt.respond(nil, { code = -32800, message = 'the permission request was withdrawn' })
  notify(string.format('the permission request for %s was withdrawn (the run ended)', prompt.title),
    vim.log.levels.WARN)
end

--- A question whose call already ended (cancelled while it waited) or whose run finished is stale.
local function withdraw_settled(params)
  local event = params.event
  for _, id in ipairs(vim.tbl_keys(state.prompts)) do
    local prompt = state.prompts[id]
    if prompt and prompt.session_id == params.sessionId and prompt.run_id == params.runId then
      if event.kind == 'run_finished'
        or (event.kind == 'tool_call_update' and event.toolCallId == prompt.call_id
          and event.status ~= 'in_progress') then
        withdraw(prompt)
      end
    end
  end
end

--- The unified diff of the change an edit proposes, from the server's `diff` ({path, oldText?,
--- newText}: the whole file before, absent for a new file, and after). nil without a change.
function M.unified_diff(diff)
  if type(diff) ~= 'table' or type(diff.path) ~= 'string' or type(diff.newText) ~= 'string' then
    return nil
  end
  local old = type(diff.oldText) == 'string' and diff.oldText or nil
  local hunks = vim.diff(old or '', diff.newText, {})
  if not hunks or hunks == '' then
    return nil
  end
  return string.format('--- %s\n+++ b/%s\n%s', old and ('a/' .. diff.path) or '/dev/null', diff.path, hunks)
end

--- Answer tool/requestPermission: the question is shown with vim.ui.select and answered through
--- `respond` once the user has chosen. An edit's proposed change (the server's `diff`) is shown
--- first, under its tool line in the chat buffer and in a float at the top of the editor, kept
--- clear of the rows the question takes at the bottom; the float closes with the answer.
function M.request_permission(params, respond, id)
  local call = params.toolCall or {}
  local title = call.title or ui.title(call.name, call.arguments)
  if config.options.approval == 'deny' then
    return respond({ outcome = 'reject' })
  end
  local prompt = {
    id = id,
    respond = respond,
    title = title,
    call_id = call.id,
    session_id = params.sessionId,
    run_id = params.runId,
    done = false,
  }
  state.prompts[id] = prompt
  local diff = M.unified_diff(params.diff)
  local view = params.sessionId and ui.get(params.sessionId)
  if view then
    if vim.fn.bufwinid(view.buf) == -1 then
      ui.view(view.session, true)
    end
    ui.proposed_diff(view, call.id, diff)
  end
  if diff then
    prompt.float = ui.show_proposal(title, diff, #choices)
  end
  local question = 'tether: ' .. title .. (params.reason and (' — ' .. params.reason) or '') .. '?'
  -- The default vim.ui.select blocks in inputlist(): draw the diff before it does.
  vim.cmd('redraw')
  vim.ui.select(choices, {
    prompt = question,
    kind = 'tether.permission',
    format_item = function(item)
      return item.label
    end,
  }, function(choice)
    if prompt.done then
      return -- withdrawn meanwhile: the server no longer waits for this answer
    end
    prompt.done = true
    state.prompts[id] = nil
    ui.close_proposal(prompt.float)
    respond({ outcome = choice and choice.outcome or 'reject' })
  end)
end

local function on_request(method, params, respond, id)
  if method == 'tool/requestPermission' then
    return M.request_permission(params, respond, id)
  end
  respond(nil, { code = -32601, message = 'method not found: ' .. method })
end

-- Progress ------------------------------------------------------------------------------------

--- Reload the buffers of files tether wrote (an applied edit, a rewind) with :checktime, so they
--- show the disk and a later :w does not write over tether's work; a buffer with unsaved changes
--- is left to :checktime's own question. Paths are relative to the workspace (or absolute).
local function reload(paths, workspace)
  local root = workspace and vim.uri_to_fname(workspace) or vim.fn.getcwd()
  for _, path in ipairs(paths) do
    local full = path:sub(1, 1) == '/' and path or (root .. '/' .. path)
    local buf = vim.fn.bufnr(vim.fn.fnamemodify(full, ':p'))
    if buf > 0 and vim.api.nvim_buf_is_loaded(buf) then
      vim.cmd('checktime ' .. buf)
    end
  end
end
M._reload = reload

local function edited_path(event)
  if event.toolKind ~= 'edit' then
    return nil
  end
  local ok, args = pcall(vim.json.decode, event.arguments or '', luanil)
  return ok and type(args) == 'table' and type(args.path) == 'string' and args.path or nil
end

--- An edit call's file, once the call completed (applied), is reloaded in its open buffers.
local function reload_edited(params)
  local event = params.event
  if event.kind == 'tool_call' then
    state.edits[event.toolCallId] = edited_path(event)
  elseif event.kind == 'tool_call_update' and event.status ~= 'in_progress' then
    local path = state.edits[event.toolCallId]
    state.edits[event.toolCallId] = nil
    if path and event.status == 'completed' then
      reload({ path }, state.workspaces[params.sessionId])
    end
  end
end

--- A sub-agent's event (its run's `parentRunId` is a run drawn here, or one of its sub-agents'):
--- drawn under the `task` call that started it, in the chat buffer of the run at the top.
local function nest_subagent(params)
  local parent = state.run_views[params.parentRunId]
  if not parent then
    return
  end
  local origin = state.run_views[params.runId]
  if not origin then
    origin = { view = parent.view, call_id = parent.call_id or params.parentToolCallId, depth = parent.depth + 1 }
    state.run_views[params.runId] = origin
    if origin.depth == 1 then
      ui.subagent(origin.view, origin.call_id, params.sessionId)
    end
  end
  if not origin.view.gone then
    ui.subagent_event(origin.view, origin.call_id, origin.depth, params.runId, params.event)
  end
end

local function on_progress(params)
  local event = params.event
  local kind = event.kind
  withdraw_settled(params)
  reload_edited(params)
  if params.parentRunId then
    nest_subagent(params)
  end
  if kind == 'iteration_started' then
    progress('iteration ' .. event.iteration)
  elseif kind == 'tool_call' then
    progress('tool ' .. (event.title or event.name))
  elseif kind == 'notice' or kind == 'warning' then
    -- Something to show a person, never part of the answer's text.
    notify(tostring(event.message), vim.log.levels.WARN)
  end
  if kind == 'run_finished' then
    state.run_views[params.runId] = nil
  end
  local view = ui.get(params.sessionId)
  if not view then
    return
  end
  if not state.run_views[params.runId] and kind ~= 'run_finished' then
    state.run_views[params.runId] = { view = view, depth = 0 }
  end
  if kind == 'run_started' then
    ui.set_prompt_id(view, event.userMessageId)
  elseif kind == 'message_delta' then
    ui.text(view, event.text)
  elseif kind == 'thought_delta' then
    ui.thought(view, event.text)
  elseif kind == 'tool_call' then
    ui.tool_call(view, event)
    ui.proposed_diff(view, event.toolCallId, M.unified_diff(event.diff))
  elseif kind == 'tool_call_update' then
    ui.tool_update(view, event)
  elseif kind == 'plan' then
    ui.plan(view, event.entries)
  end
end
M._on_progress = on_progress -- for tests

local function on_notification(method, params)
  if method == 'kernel/progress' then
    on_progress(params)
  elseif method == '$/cancelRequest' then
    local prompt = state.prompts[params.id]
    if prompt then
      withdraw(prompt)
    end
  elseif method == 'window/showMessage' then
    local levels = { vim.log.levels.ERROR, vim.log.levels.WARN, vim.log.levels.INFO, vim.log.levels.DEBUG }
    notify(tostring(params.message), levels[params.type] or vim.log.levels.INFO)
  end
end

-- The server ----------------------------------------------------------------------------------

local function on_exit(client, code, signal)
  if state.client == client then
    state.runs = {}
  end
  for _, prompt in pairs(state.prompts) do
    prompt.done = true -- nobody is left to answer
    ui.close_proposal(prompt.float)
  end
  state.prompts = {}
  if client.ready and (code ~= 0 or signal ~= 0) then
    notify(client:exit_reason() .. '; the next command restarts it', vim.log.levels.WARN)
  end
end

--- Call fn(client) once the server is initialized (starting it if needed).
local function with_client(fn)
  local client = state.client
  if client and client.ready and not client.closed then
    return fn(client)
  end
  if state.starting then
    table.insert(state.starting, fn)
    return
  end
  state.starting = { fn }
  local started
  started = rpc.start({
    cmd = config.server_cmd(),
    cwd = config.options.cwd,
    init_options = config.init_options(),
    capabilities = { tether = { permissions = true } },
    on_notification = on_notification,
    on_request = on_request,
    on_exit = function(code, signal)
      on_exit(started, code, signal)
    end,
  }, function(err)
    local waiting = state.starting
    state.starting = nil
    if err then
      notify('the server did not start: ' .. tostring(err.message), vim.log.levels.ERROR)
      return
    end
    if state.session then -- from an earlier server: is it still there?
      M._check_resumable(started, state.session)
    end
    for _, f in ipairs(waiting) do
      f(started)
    end
  end)
  state.client = started
end

--- After the server (re)started: is the current session still there? (Not with a memory store.)
function M._check_resumable(client, session)
  client:request('session/get', { sessionId = session.sessionId }, function(err)
    if err and err.code == SESSION_NOT_FOUND and state.session == session then
      M._unresumable(session, ui.get(session.sessionId))
    end
  end)
end

local function request(method, params, on_result)
  with_client(function(client)
    client:request(method, params, function(err, result)
      if err then
        notify(method .. ': ' .. tostring(err.message), vim.log.levels.ERROR)
        return
      end
      on_result(result)
    end)
  end)
end

--- Every message of a session, oldest first, page by page.
local function all_messages(session_id, on_done, cursor, acc)
  acc = acc or {}
  request('session/messages', { sessionId = session_id, limit = 1000, cursor = cursor }, function(page)
    vim.list_extend(acc, page.messages)
    if page.nextCursor then
      all_messages(session_id, on_done, page.nextCursor, acc)
    else
      on_done(acc)
    end
  end)
end

--- Make a session current and show its chat buffer; a buffer made anew (the session reopened
--- after :bdelete, picked from the list, or forked) is filled from session/messages first.
--- then(view), if given, runs once the transcript is there.
local function open(session, empty, after)
  state.session = session
  local view, fresh = ui.view(session, true)
  if fresh and not empty then
    all_messages(session.sessionId, function(messages)
      view = ui.get(session.sessionId) or view
      ui.transcript(view, messages)
      ui.plan(view, session.plan)
      if after then
        after(view)
      end
    end)
  elseif after then
    after(view)
  end
  return view
end

--- :TetherNew — a new session in the current directory, shown in a split.
function M.new_session(title, on_done)
  request('session/create', { title = title }, function(session)
    open(session, true)
    if on_done then
      on_done(session)
    end
  end)
end

local function buffer_label(buf)
  local name = vim.api.nvim_buf_get_name(buf)
  return name ~= '' and vim.fn.fnamemodify(name, ':.') or '[No Name]'
end

--- A context: { buf, first, last } (lines of a buffer; no first: all of it) or { path } (a
--- file as it is on disk). Returns its label and the text sent: the label, then a fenced block.
local function context_entry(context)
  local label, lines, ft
  if context.path then
    local full = vim.fn.fnamemodify(context.path, ':p')
    if vim.fn.filereadable(full) == 0 then
      return nil, 'cannot read ' .. context.path
    end
    label, lines = vim.fn.fnamemodify(full, ':.'), vim.fn.readfile(full)
    -- vim.filetype.match({filename}) is 0.8+; 0.7 gets the block without a language.
    local ok, match = pcall(function()
      return vim.filetype.match({ filename = full })
    end)
    ft = ok and type(match) == 'string' and match or ''
  else
    label, ft = buffer_label(context.buf), vim.bo[context.buf].filetype or ''
    local first, last = context.first or 1, context.last or vim.api.nvim_buf_line_count(context.buf)
    lines = vim.api.nvim_buf_get_lines(context.buf, first - 1, last, false)
    if context.first then
      label = string.format('%s lines %d-%d', label, first, last)
    end
  end
  return label, string.format('%s:\n```%s\n%s\n```', label, ft or '', table.concat(lines, '\n'))
end

local function context_text(context)
  local _, text = context_entry(context)
  return text
end

--- The prompt with what :TetherAdd gathered after it; the gathered context is then used up.
local function with_added_context(text)
  if #state.context == 0 then
    return text
  end
  local parts = { text }
  for _, entry in ipairs(state.context) do
    table.insert(parts, entry.text)
  end
  state.context = {}
  return table.concat(parts, '\n\n')
end

--- :TetherAdd — add a buffer's lines (a range), the whole buffer, or a file to the next prompt.
--- context: as for context_entry; nil clears what was added.
function M.add(context)
  if not context then
    state.context = {}
    notify('no context for the next prompt')
    return
  end
  local label, text = context_entry(context)
  if not label then
    notify(text, vim.log.levels.ERROR)
    return
  end
  table.insert(state.context, { label = label, text = text })
  local labels = vim.tbl_map(function(entry)
    return entry.label
  end, state.context)
  notify('context for the next prompt: ' .. table.concat(labels, ', '))
end

M.session_name = ui.name

--- The session is gone from the server (a memory store and a restarted server, or deleted):
--- say so where the user looks, and forget it, so that the next prompt starts a new session.
local function unresumable(session, view)
  if session.unresumable then
    return -- said once
  end
  session.unresumable = true
  local text = string.format("session '%s' cannot be resumed: the server no longer has it", M.session_name(session))
  local server = state.client and state.client.server
  local store = server and server.capabilities and server.capabilities.sessions
  if store and store.durable == false then
    text = text .. ' (sessions are kept in memory: set store = "sqlite" to keep them)'
  end
  if view then
    ui.note(view, text .. '; the next prompt starts a new session')
  end
  notify(text, vim.log.levels.ERROR)
  if state.session and state.session.sessionId == session.sessionId then
    state.session = nil
  end
end
M._unresumable = unresumable

--- Show the session's title (given by its first prompt) in its chat buffer once a run ended.
local function retitle(session_id)
  request('session/get', { sessionId = session_id }, function(session)
    if state.session and state.session.sessionId == session_id then
      state.session = session
    end
    local view = ui.get(session_id)
    if view then
      view.session = session
      ui.heading(view, M.session_name(session))
    end
  end)
end

local function run(session, prompt)
  state.runs[session.sessionId] = true
  state.workspaces[session.sessionId] = session.workspace
  open(session, false, function(view)
    ui.prompt(view, prompt)
    progress('running')
    state.client:request('kernel/run', { sessionId = session.sessionId, prompt = prompt }, function(err, result)
      state.runs[session.sessionId] = nil
      view = ui.get(session.sessionId) or view
      view.commands = nil -- a command file may have come or gone: asked again at the next `/`
      if err and err.code == SESSION_NOT_FOUND then
        return unresumable(session, view)
      elseif err then
        ui.error(view, err)
        notify('run failed: ' .. tostring(err.message), vim.log.levels.ERROR)
        return
      end
      ui.finished(view, result)
      if not session.title then
        retitle(session.sessionId)
      end
      progress('run finished: ' .. result.stopReason)
      local cut = ui.STOP_NOTES[result.stopReason]
      if cut then
        notify(cut, vim.log.levels.WARN)
      end
    end)
  end)
end

local function busy(session)
  if state.runs[session.sessionId] then
    notify('a run is going in this session (:TetherCancel stops it)', vim.log.levels.WARN)
    return true
  end
  return false
end

--- :TetherAsk — send a prompt (asked for when not given), with the given lines as context.
function M.ask(prompt, context)
  local function send(text)
    if not text or text == '' then
      return
    end
    if context then
      text = text .. '\n\n' .. context_text(context)
    end
    text = with_added_context(text)
    with_client(function()
      if state.session then
        if not busy(state.session) then
          run(state.session, text)
        end
      else
        M.new_session(nil, function(session)
          run(session, text)
        end)
      end
    end)
  end
  if prompt then
    send(prompt)
  else
    vim.ui.input({ prompt = 'tether> ' }, send)
  end
end

--- <CR> in a chat buffer: send what the prompt area holds to that buffer's session.
function M.send(buf)
  local view = ui.by_buffer(buf or vim.api.nvim_get_current_buf())
  if not view then
    notify('not a tether chat buffer', vim.log.levels.WARN)
    return
  end
  if not view.session.unresumable then
    state.session = view.session
  end
  if busy(view.session) then
    return
  end
  local text = ui.take_prompt(view)
  if text == '' then
    notify('type a message under the prompt line first', vim.log.levels.WARN)
    return
  end
  text = with_added_context(text)
  with_client(function()
    if view.session.unresumable then
      -- Said in the buffer: the session is gone, the conversation goes on in a new one.
      return M.new_session(nil, function(session)
        run(session, text)
      end)
    end
    run(view.session, text)
  end)
end

--- :TetherChat — show the chat buffer of the current session (a new session if there is none).
function M.chat()
  if state.session then
    open(state.session)
  else
    M.new_session(nil)
  end
end

--- :TetherCancel — cancel the run of the current session (or of the chat buffer's).
function M.cancel(buf)
  local view = buf and ui.by_buffer(buf)
  local session = view and view.session or state.session
  if not session or not state.client then
    notify('no session', vim.log.levels.WARN)
    return
  end
  request('kernel/cancel', { sessionId = session.sessionId }, function(result)
    if not result.cancelled then
      notify('nothing to cancel')
    end
  end)
end

--- How long ago an ISO 8601 UTC time (`2026-11-23T22:55:01.421572Z`) was: `just now`, `5 min ago`,
--- `3 h ago`, `2 d ago` (the time itself when it cannot be read).
function M.ago(iso, now)
  local y, mo, d, h, mi, sec = tostring(iso):match('^(%d+)-(%d+)-(%d+)T(%d+):(%d+):(%d+)')
  if not y then
    return tostring(iso)
  end
  now = now or os.time()
  -- os.time reads a table as local time: shift by the local offset to read it as UTC.
  local offset = os.time(os.date('*t', now)) - os.time(os.date('!*t', now))
  local t = os.time({ year = y, month = mo, day = d, hour = h, min = mi, sec = sec }) + offset
  local seconds = math.max(0, now - t)
  if seconds < 60 then
    return 'just now'
  elseif seconds < 3600 then
    return string.format('%d min ago', seconds / 60)
  elseif seconds < 86400 then
    return string.format('%d h ago', seconds / 3600)
  end
  return string.format('%d d ago', seconds / 86400)
end

--- session/configure of the current session (a new one when there is none) with `fields`; the
--- views follow, and `key`'s new value is said.
local function configure_current(fields, key, on_done)
  local function configure(session)
    local params = vim.tbl_extend('force', { sessionId = session.sessionId }, fields)
    request('session/configure', params, function(updated)
      if state.session and state.session.sessionId == updated.sessionId then
        state.session = updated
      end
      local view = ui.get(updated.sessionId)
      if view then
        view.session = updated
      end
      notify(key .. ' ' .. tostring(updated[key]))
      if on_done then
        on_done(updated)
      end
    end)
  end
  if state.session then
    configure(state.session)
  else
    M.new_session(nil, configure)
  end
end

--- :TetherMode [mode] — set the current session's mode (session/configure {mode}; a new session
--- when there is none); without a mode, pick one. The server keeps it with the session.
function M.mode(mode, on_done)
  if not mode or mode == '' then
    local current = state.session and state.session.mode or 'ask'
    vim.ui.select(M.modes, {
      prompt = 'tether mode (now ' .. current .. ')',
    }, function(choice)
      if choice then
        M.mode(choice, on_done)
      end
    end)
    return
  end
  if not vim.tbl_contains(M.modes, mode) then
    notify(string.format("unknown mode '%s': one of %s", mode, table.concat(M.modes, ', ')), vim.log.levels.ERROR)
    return
  end
  configure_current({ mode = mode }, 'mode', on_done)
end

--- :TetherModel [model] — the model of the current session's next runs (session/configure
--- {model}; a new session when there is none); without one, asked for (the current one offered).
function M.model(model, on_done)
  if not model or model == '' then
    local current = state.session and state.session.model or ''
    vim.ui.input({ prompt = 'tether model: ', default = current }, function(text)
      if text and text ~= '' then
        M.model(text, on_done)
      end
    end)
    return
  end
  configure_current({ model = model }, 'model', on_done)
end

--- The models to complete :TetherModel with: the session's allow-list and its current model.
function M.models()
  local session = state.session or {}
  local models = vim.deepcopy(session.allowedModels or {})
  if session.model and not vim.tbl_contains(models, session.model) then
    table.insert(models, 1, session.model)
  end
  return models
end

--- The yank key in a chat buffer: the code block under the cursor into the register.
function M.yank_code_block(buf, register)
  local view = ui.by_buffer(buf or vim.api.nvim_get_current_buf())
  if not view then
    notify('not a tether chat buffer', vim.log.levels.WARN)
    return
  end
  local lines = ui.code_block_at(view, vim.api.nvim_win_get_cursor(0)[1] - 1)
  if not lines then
    notify('put the cursor in a code block (``` … ```) to yank it', vim.log.levels.WARN)
    return
  end
  vim.fn.setreg(register or '"', lines, 'l')
  notify(string.format('yanked %d line%s', #lines, #lines == 1 and '' or 's'))
end

--- :TetherSessions — pick a session; its chat buffer opens and it becomes the current one.
function M.sessions()
  request('session/list', {}, function(result)
    if #result.sessions == 0 then
      notify('no sessions')
      return
    end
    vim.ui.select(result.sessions, {
      prompt = 'tether sessions',
      format_item = function(s)
        return string.format('%s  (%d messages, %s)', M.session_name(s), s.messageCount, M.ago(s.updatedAt))
      end,
    }, function(session)
      if session then
        open(session)
      end
    end)
  end)
end

--- :TetherFork — fork the current session and switch to the fork (its history shown).
function M.fork(title)
  local session = state.session
  if not session then
    notify('no session', vim.log.levels.WARN)
    return
  end
  request('session/fork', { sessionId = session.sessionId, title = title }, function(fork)
    open(fork)
    notify('forked into ' .. M.session_name(fork))
  end)
end

-- Checkpoints -----------------------------------------------------------------------------

local function say_rewound(result)
  local parts = {}
  if #result.restored > 0 then
    table.insert(parts, 'restored ' .. table.concat(result.restored, ', '))
  end
  if #result.removed > 0 then
    table.insert(parts, 'removed ' .. table.concat(result.removed, ', '))
  end
  if (result.messagesRemoved or 0) > 0 then
    table.insert(parts, string.format('%d messages removed', result.messagesRemoved))
  end
  notify(#parts > 0 and table.concat(parts, '; ') or 'nothing to restore')
end

--- session/rewind; a file changed outside tether since it was recorded (-32602 with
--- `data.paths`) is overwritten only when the user picks "Overwrite". on_done(result) after.
local function rewind(params, workspace, on_done)
  with_client(function(client)
    client:request('session/rewind', params, function(err, result)
      local paths = err and err.code == -32602 and type(err.data) == 'table' and err.data.paths
      if paths and not params.force then
        vim.ui.select({ 'Overwrite', 'Cancel' }, {
          prompt = 'tether: changed since tether wrote them: ' .. table.concat(paths, ', '),
          kind = 'tether.rewind_conflict',
          format_item = tostring,
        }, function(choice)
          if choice == 'Overwrite' then
            rewind(vim.tbl_extend('force', params, { force = true }), workspace, on_done)
          end
        end)
        return
      elseif err then
        notify('session/rewind: ' .. tostring(err.message), vim.log.levels.ERROR)
        return
      end
      reload(vim.list_extend(vim.list_extend({}, result.restored), result.removed), workspace)
      say_rewound(result)
      on_done(result)
    end)
  end)
end

--- Draw a session's chat buffer again from session/messages (its history was rewound).
local function redraw(session_id)
  request('session/get', { sessionId = session_id }, function(session)
    all_messages(session_id, function(messages)
      local view = ui.get(session_id)
      if view then
        view.session = session
        ui.clear(view)
        ui.transcript(view, messages)
      end
      if state.session and state.session.sessionId == session_id then
        state.session = session
      end
    end)
  end)
end

--- :TetherUndo — put back the files the current session's last turn that changed any changed.
function M.undo(on_done)
  local session = state.session
  if not session then
    notify('no session', vim.log.levels.WARN)
    return
  end
  if busy(session) then
    return
  end
  request('session/checkpoints', { sessionId = session.sessionId }, function(result)
    local last = result.checkpoints[#result.checkpoints]
    if not last then
      notify('no turn of this session changed files')
      return
    end
    rewind({ sessionId = session.sessionId, messageId = last.messageId, files = true, history = false },
      session.workspace, on_done or function() end)
  end)
end

local restore_choices = {
  { label = 'Files', files = true, history = false },
  { label = 'Conversation', files = false, history = true },
  { label = 'Files and conversation', files = true, history = true },
}

--- The restore key on a prompt line of a chat buffer: back to before that prompt's turn — its
--- files (and the later turns'), the conversation from that prompt on, or both. The files it
--- will change are listed in the question.
function M.restore(buf, row)
  buf = buf or vim.api.nvim_get_current_buf()
  local view = ui.by_buffer(buf)
  if not view then
    notify('not a tether chat buffer', vim.log.levels.WARN)
    return
  end
  row = row or (vim.api.nvim_win_get_cursor(0)[1] - 1)
  local message_id = ui.prompt_at(view, row)
  if not message_id then
    notify('put the cursor on a prompt line (> ...) to restore to before it', vim.log.levels.WARN)
    return
  end
  local session_id = view.session.sessionId
  if busy(view.session) then
    return
  end
  request('session/checkpoints', { sessionId = session_id }, function(result)
    -- This turn's files and every later turn's: what a rewind at this prompt puts back.
    local from_here = ui.prompts_from(view, message_id)
    local files, seen = {}, {}
    for _, checkpoint in ipairs(result.checkpoints) do
      if from_here[checkpoint.messageId] then
        for _, path in ipairs(checkpoint.files) do
          if not seen[path] then
            seen[path] = true
            table.insert(files, path)
          end
        end
      end
    end
    local choices = #files > 0 and restore_choices or { restore_choices[2] }
    local what = #files > 0 and ('files it will change: ' .. table.concat(files, ', '))
      or 'no files to restore'
    vim.ui.select(choices, {
      prompt = 'tether: restore to before this prompt (' .. what .. ')',
      kind = 'tether.restore',
      format_item = function(item)
        return item.label
      end,
    }, function(choice)
      if not choice then
        return
      end
      local params = { sessionId = session_id, messageId = message_id, files = choice.files,
        history = choice.history }
      rewind(params, view.session.workspace, function()
          if choice.history then
            redraw(session_id)
          end
        end)
    end)
  end)
end

--- :TetherOpen [ID] — open a session's chat buffer (the session becomes the current one): ID,
--- else the sub-agent of the `task` call under the cursor in a chat buffer.
function M.open_session(session_id, buf, row)
  if not session_id or session_id == '' then
    local view = ui.by_buffer(buf or vim.api.nvim_get_current_buf())
    row = row or (vim.api.nvim_win_get_cursor(0)[1] - 1)
    session_id = view and ui.child_at(view, row)
    if not session_id then
      notify('put the cursor on a task call (or its sub-agent\'s lines), or give a session id', vim.log.levels.WARN)
      return
    end
  end
  request('session/get', { sessionId = session_id }, function(session)
    open(session)
  end)
end

--- The chat buffer of the current session, if any.
function M.buffer()
  local view = state.session and ui.get(state.session.sessionId)
  return view and view.buf
end

--- Whether a run of the current session is going.
function M.running()
  return state.session ~= nil and state.runs[state.session.sessionId] == true
end

function M.stop()
  if state.client then
    state.client:stop()
    state.client = nil
  end
end

-- `/` completion ------------------------------------------------------------------------------

local COMMANDS_WAIT_MS = 5000 -- how long <C-x><C-o> waits for session/commands the first time

--- The session's slash commands (session/commands), fetched once per chat buffer and again after
--- each run (a command file may have been added meanwhile); nil when the server does not answer.
local function session_commands(view)
  if view.commands then
    return view.commands
  end
  local done = false
  with_client(function(client)
    client:request('session/commands', { sessionId = view.session.sessionId }, function(err, result)
      done = true
      if err then
        notify('session/commands: ' .. tostring(err.message), vim.log.levels.ERROR)
      else
        view.commands = result.commands
      end
    end)
  end)
  vim.wait(COMMANDS_WAIT_MS, function()
    return done
  end, 10)
  return view.commands
end

--- Where the `/name` typed on row (0-based) starts (0-based byte column), or nil: only on the
--- first line of the prompt area that holds text (the prompt's start is where a command goes).
local function command_start(view, row, col)
  local separator = ui.separator_row(view)
  if row <= separator then
    return nil
  end
  local above = vim.api.nvim_buf_get_lines(view.buf, separator + 1, row, false)
  for _, line in ipairs(above) do
    if line:match('%S') then
      return nil
    end
  end
  local line = vim.api.nvim_buf_get_lines(view.buf, row, row + 1, false)[1] or ''
  local indent = line:sub(1, col):match('^(%s*)/[^%s]*$')
  return indent and #indent or nil
end

--- The completion items of the commands whose `/name` starts with `base`.
function M.command_items(commands, base)
  local items = {}
  for _, command in ipairs(commands or {}) do
    local word = '/' .. command.name
    if word:sub(1, #base) == base then
      local hint = command.argumentHint and (command.argumentHint .. '  ') or ''
      table.insert(items, { word = word, menu = hint .. (command.description or ''),
        kind = command.source, info = command.description or '', icase = 0 })
    end
  end
  return items
end

--- 'omnifunc' of the chat buffers (<C-x><C-o>): `/` completes the session's slash commands at
--- the start of the prompt area.
function M.omnifunc(findstart, base)
  local view = ui.by_buffer(vim.api.nvim_get_current_buf())
  if not view then
    return findstart == 1 and -3 or {}
  end
  if findstart == 1 then
    local cursor = vim.api.nvim_win_get_cursor(0)
    return command_start(view, cursor[1] - 1, cursor[2]) or -3
  end
  return M.command_items(session_commands(view), base)
end

-- Keys of a chat buffer -----------------------------------------------------------------------

local function map(buf, spec, fn, desc)
  if not spec then
    return
  end
  if type(spec) == 'string' then
    spec = { n = spec }
  end
  for mode, lhs in pairs(spec) do
    if lhs then
      vim.keymap.set(mode, lhs, fn, { buffer = buf, desc = desc })
    end
  end
end

ui.on_create = function(view)
  vim.bo[view.buf].omnifunc = "v:lua.require'tether'.omnifunc"
  local keys = config.options.keymaps or {}
  map(view.buf, keys.send, function()
    if vim.fn.mode() ~= 'n' then
      vim.cmd('stopinsert')
    end
    M.send(view.buf)
  end, 'tether: send the prompt')
  map(view.buf, keys.cancel, function()
    M.cancel(view.buf)
  end, 'tether: cancel the running turn')
  map(view.buf, keys.yank, function()
    M.yank_code_block(view.buf, vim.v.register)
  end, 'tether: yank the code block under the cursor')
  map(view.buf, keys.open, function()
    M.open_session(nil, view.buf)
  end, 'tether: open the sub-agent session of the task call under the cursor')
  map(view.buf, keys.restore, function()
    M.restore(view.buf)
  end, 'tether: restore to before the prompt under the cursor')
end

return M
