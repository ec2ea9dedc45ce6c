-- tether for Neovim: sessions with the tether agent server, streamed into scratch buffers.
local config = require('tether.config')
local rpc = require('tether.rpc')
local ui = require('tether.ui')

local M = {}

local state = {
  client = nil, -- the rpc client, once started
  starting = nil, -- callbacks waiting for initialize
  session = nil, -- the current Session
  runs = {}, -- sessionId -> true while a kernel/run is going
  always = {}, -- tool names the user allowed for the rest of this server's life
  prompts = {}, -- permission questions waiting for the user's answer
}
M._state = state

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

local withdraw_settled

local function on_progress(params)
  local view = ui.get(params.sessionId)
  local event = params.event
  local kind = event.kind
  withdraw_settled(params)
  if kind == 'iteration_started' then
    progress('iteration ' .. event.iteration)
  elseif kind == 'tool_call' then
    progress('tool ' .. event.name)
  end
  if not view then
    return
  end
  if kind == 'message_delta' then
    ui.text(view, event.text)
  elseif kind == 'tool_call' then
    ui.tool_call(view, event)
  elseif kind == 'tool_call_update' then
    ui.tool_update(view, event)
  end
end

local choices = {
  { label = 'Allow', outcome = 'allow' },
  { label = 'Always', outcome = 'allow_always' },
  { label = 'Reject', outcome = 'reject' },
}

--- Mark a waiting question answered (by the user or by its withdrawal); false when it already was.
local function settle(prompt)
  if prompt.done then
    return false
  end
  prompt.done = true
  for i, p in ipairs(state.prompts) do
    if p == prompt then
      table.remove(state.prompts, i)
      break
    end
  end
  return true
end

--- Stop waiting for a permission question the server withdrew: its coroutine answers -32800 (the
--- server ignores it) and the user's later choice does nothing.
local function withdraw(prompt)
  if not settle(prompt) then
    return
  end
  notify(string.format('the permission request for %s was withdrawn (the run ended)', prompt.name or '?'),
    vim.log.levels.WARN)
  coroutine.resume(prompt.co, nil)
end

--- $/cancelRequest from the server names a request id, which the rpc layer does not give the
--- request handler: with a single question waiting it is that one; with several, the progress
--- events that settle the call (below) withdraw the right one.
local function on_cancel_request()
  if #state.prompts == 1 then
    withdraw(state.prompts[1])
  end
end

--- A question whose call already ended (cancelled while it waited) or whose run finished is stale.
withdraw_settled = function(params)
  local event = params.event
  for _, prompt in ipairs(vim.list_slice(state.prompts)) do
    if prompt.session_id == params.sessionId and prompt.run_id == params.runId then
      if event.kind == 'run_finished'
        or (event.kind == 'tool_call_update' and event.toolCallId == prompt.call_id
          and event.status ~= 'in_progress') then
        withdraw(prompt)
      end
    end
  end
end

M._on_progress = on_progress -- for tests
M._on_cancel_request = on_cancel_request

--- Answer tool/requestPermission. Runs inside the coroutine of the rpc layer: the prompt is shown
--- on the main loop and the coroutine waits for the choice, so any vim.ui.select works. A question
--- the server withdraws makes the coroutine answer -32800 at once; the prompt (which cannot be
--- closed in general) then does nothing when answered.
function M.request_permission(params)
  local call = params.toolCall or {}
  local policy = config.options.approval
  if policy == 'allow' or state.always[call.name] then
    return { outcome = 'allow' }
  elseif policy == 'reject' then
    return { outcome = 'reject' }
  end
  local co = coroutine.running()
  if not co or coroutine.isyieldable and not coroutine.isyieldable() then
    return { outcome = 'reject' }
  end
  local pending = {
    co = co,
    name = call.name,
    call_id = call.id,
    session_id = params.sessionId,
    run_id = params.runId,
    done = false,
  }
  table.insert(state.prompts, pending)
  vim.schedule(function()
    if pending.done then
      return -- withdrawn before it was shown
    end
    local prompt = string.format('tether: run %s %s?', call.name or '?', call.arguments or '')
    vim.ui.select(choices, {
      prompt = prompt,
      format_item = function(item)
        return item.label
      end,
    }, function(choice)
      if not settle(pending) then
        return -- withdrawn meanwhile: the server no longer waits for this answer
      end
      coroutine.resume(co, choice and choice.outcome or 'reject')
    end)
  end)
  local outcome = coroutine.yield()
  if outcome == nil then
    return nil, { code = -32800, message = 'the permission request was withdrawn' }
  end
  if outcome == 'allow_always' and call.name then
    state.always[call.name] = true
  end
  return { outcome = outcome }
end

local function on_request(method, params)
  if method == 'tool/requestPermission' then
    return M.request_permission(params)
  end
  return nil, { code = -32601, message = 'method not found: ' .. method }
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
  state.client = rpc.start({
    cmd = config.options.cmd,
    cwd = config.options.cwd,
    init_options = config.init_options(),
    capabilities = { tether = { permissions = true } },
    on_notification = function(method, params)
      if method == 'kernel/progress' then
        on_progress(params)
      elseif method == '$/cancelRequest' then
        on_cancel_request()
      end
    end,
    on_request = on_request,
    on_exit = function(code, signal)
      state.runs = {}
      for _, prompt in ipairs(vim.list_slice(state.prompts)) do
        prompt.done = true -- nobody is left to answer
      end
      state.prompts = {}
      if code ~= 0 or signal ~= 0 then
        notify(string.format('server exited (code %s, signal %s); the next command restarts it', code, signal),
          vim.log.levels.WARN)
      end
    end,
  }, function(err)
    local waiting = state.starting
    state.starting = nil
    if err then
      notify('server did not start: ' .. tostring(err.message), vim.log.levels.ERROR)
      return
    end
    for _, f in ipairs(waiting) do
      f(state.client)
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

local function open(session)
  state.session = session
  return ui.view(session, true)
end

--- :TetherNew — a new session in the current directory, shown in a split.
function M.new_session(title, on_done)
  request('session/create', { title = title }, function(session)
    open(session)
    if on_done then
      on_done(session)
    end
  end)
end

local function context_text(context)
  local lines = vim.api.nvim_buf_get_lines(context.buf, context.first - 1, context.last, false)
  local name = vim.api.nvim_buf_get_name(context.buf)
  name = name ~= '' and vim.fn.fnamemodify(name, ':.') or '[No Name]'
  local ft = vim.bo[context.buf].filetype or ''
  return string.format('%s lines %d-%d:\n```%s\n%s\n```', name, context.first, context.last, ft,
    table.concat(lines, '\n'))
end

local function run(session, prompt)
  if state.runs[session.sessionId] then
    notify('a run is going in this session (:TetherCancel stops it)', vim.log.levels.WARN)
    return
  end
  local view = ui.view(session, true)
  ui.prompt(view, prompt)
  state.runs[session.sessionId] = true
  progress('running')
  state.client:request('kernel/run', { sessionId = session.sessionId, prompt = prompt }, function(err, result)
    state.runs[session.sessionId] = nil
    if err then
      ui.error(view, err)
      notify('run failed: ' .. tostring(err.message), vim.log.levels.ERROR)
      return
    end
    ui.finished(view, result)
    progress('run finished: ' .. result.stopReason)
  end)
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
    with_client(function()
      if state.session then
        run(state.session, text)
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

--- :TetherCancel — cancel the run of the current session.
function M.cancel()
  local session = state.session
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

--- :TetherSessions — pick a session; its transcript opens and it becomes the current one.
function M.sessions()
  request('session/list', {}, function(result)
    if #result.sessions == 0 then
      notify('no sessions')
      return
    end
    vim.ui.select(result.sessions, {
      prompt = 'tether sessions',
      format_item = function(s)
        return string.format('%s  (%d messages, %s)', s.title or s.sessionId, s.messageCount, s.updatedAt)
      end,
    }, function(session)
      if not session then
        return
      end
      local fresh = ui.get(session.sessionId) == nil
      local view = open(session)
      if fresh then
        request('session/messages', { sessionId = session.sessionId, limit = 1000 }, function(page)
          ui.transcript(view, page.messages)
        end)
      end
    end)
  end)
end

--- :TetherFork — fork the current session and switch to the fork.
function M.fork(title)
  local session = state.session
  if not session then
    notify('no session', vim.log.levels.WARN)
    return
  end
  request('session/fork', { sessionId = session.sessionId, title = title }, function(fork)
    open(fork)
    notify('forked into ' .. (fork.title or fork.sessionId))
  end)
end

--- The current session's buffer, if any.
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

return M
