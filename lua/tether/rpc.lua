-- The JSON-RPC client: `tether serve` spawned with vim.loop (libuv), LSP framing on stdio.
--
-- vim.lsp.rpc is not used: on Neovim 0.7 it calls a server request's handler synchronously and
-- sends whatever it returns, so a permission question could never wait for the user; and it sends
-- the server's stderr only to lsp.log, so a server that cannot start (`No module named tether`)
-- looks like a silent timeout. Here a server request gets a `respond` function that may be called
-- later (exactly once), and stderr is kept to explain an exit.
local uv = vim.uv or vim.loop

local M = {}

local Client = {}
Client.__index = Client

local STDERR_KEEP = 4096 -- bytes of the server's stderr kept to explain an exit

local function encode(message)
  local body = vim.json.encode(message)
  return string.format('Content-Length: %d\r\n\r\n%s', #body, body)
end

local function decode(body)
  return pcall(vim.json.decode, body, { luanil = { object = true, array = true } })
end

--- Take every complete message out of the buffer; returns the messages and the rest.
local function split_messages(buffer)
  local messages = {}
  while true do
    local header_end = buffer:find('\r\n\r\n', 1, true)
    if not header_end then
      break
    end
    local length = tonumber(buffer:sub(1, header_end - 1):lower():match('content%-length:%s*(%d+)'))
    if not length then
      -- No length: the stream cannot be resynchronised; drop the header and go on.
      buffer = buffer:sub(header_end + 4)
    else
      local body_start = header_end + 4
      if #buffer < body_start + length - 1 then
        break
      end
      table.insert(messages, buffer:sub(body_start, body_start + length - 1))
      buffer = buffer:sub(body_start + length)
    end
  end
  return messages, buffer
end
M._split_messages = split_messages -- for tests

--- The last lines of what the server wrote on stderr (without the trailing newline).
function Client:stderr_tail(max_lines)
  local text = table.concat(self.stderr):gsub('%s+$', '')
  local lines = vim.split(text, '\n', { plain = true })
  if max_lines and #lines > max_lines then
    lines = vim.list_slice(lines, #lines - max_lines + 1)
  end
  return table.concat(lines, '\n')
end

--- Why the server is gone: its exit status and the end of its stderr.
function Client:exit_reason()
  local reason = string.format('the server exited (code %s, signal %s)', tostring(self.exit_code),
    tostring(self.exit_signal))
  local tail = self:stderr_tail(5)
  if tail ~= '' then
    reason = reason .. ': ' .. tail
  end
  return reason
end

function Client:_write(message)
  if self.closed or not self.stdin or self.stdin:is_closing() then
    return false
  end
  self.stdin:write(encode(message))
  return true
end

function Client:_respond(id, result, err)
  local message = { jsonrpc = '2.0', id = id }
  if err then
    message.error = err
  else
    message.result = result == nil and vim.NIL or result
  end
  self:_write(message)
end

function Client:_dispatch(body)
  local ok, message = decode(body)
  if not ok or type(message) ~= 'table' then
    return
  end
  if message.method and message.id ~= nil then
    self:_on_server_request(message)
  elseif message.method then
    if self.opts.on_notification then
      self.opts.on_notification(message.method, message.params or {})
    end
  elseif message.id ~= nil then
    local callback = self.pending[message.id]
    self.pending[message.id] = nil
    if callback then
      callback(message.error, message.result)
    end
  end
end

--- A server request: the handler gets respond(result, err), to call once, now or later.
function Client:_on_server_request(message)
  local answered = false
  local function respond(result, err)
    if answered then
      return
    end
    answered = true
    self:_respond(message.id, result, err)
  end
  if not self.opts.on_request then
    return respond(nil, { code = -32601, message = 'method not found: ' .. message.method })
  end
  local ok, err = pcall(self.opts.on_request, message.method, message.params or {}, respond, message.id)
  if not ok then
    respond(nil, { code = -32603, message = 'tether.nvim: ' .. tostring(err) })
  end
end

function Client:_finish()
  if self.exited and self.stderr_done and not self.finished then
    self.finished = true
    self:_on_exit(self.exited[1], self.exited[2])
  end
end

function Client:_on_exit(code, signal)
  self.closed = true
  self.exit_code, self.exit_signal = code, signal
  for _, pipe in ipairs({ self.stdin, self.stdout, self.stderr_pipe }) do
    if pipe and not pipe:is_closing() then
      pipe:close()
    end
  end
  if self.handle and not self.handle:is_closing() then
    self.handle:close()
  end
  local pending = self.pending
  self.pending = {}
  local err = { code = -32099, message = self:exit_reason() }
  for _, callback in pairs(pending) do
    callback(err, nil)
  end
  if self.opts.on_exit then
    self.opts.on_exit(code, signal)
  end
end

local function spawn(self, opts)
  local stdin, stdout, stderr = uv.new_pipe(false), uv.new_pipe(false), uv.new_pipe(false)
  self.stdin, self.stdout, self.stderr_pipe = stdin, stdout, stderr
  local handle, pid_or_err = uv.spawn(opts.cmd[1], {
    args = vim.list_slice(opts.cmd, 2),
    stdio = { stdin, stdout, stderr },
    cwd = opts.cwd,
  }, vim.schedule_wrap(function(code, signal)
    -- Report the exit once stderr is read to its end (it explains the exit), or soon anyway.
    self.exited = { code, signal }
    self:_finish()
    vim.defer_fn(function()
      self.stderr_done = true
      self:_finish()
    end, 500)
  end))
  if not handle then
    for _, pipe in ipairs({ stdin, stdout, stderr }) do
      pipe:close()
    end
    return false, pid_or_err
  end
  self.handle, self.pid = handle, pid_or_err
  local buffer = ''
  stdout:read_start(function(err, chunk)
    if err or not chunk then
      return
    end
    local messages
    messages, buffer = split_messages(buffer .. chunk)
    for _, body in ipairs(messages) do
      vim.schedule(function()
        self:_dispatch(body)
      end)
    end
  end)
  stderr:read_start(function(err, chunk)
    if err or not chunk then
      vim.schedule(function()
        self.stderr_done = true
        self:_finish()
      end)
      return
    end
    table.insert(self.stderr, chunk)
    local size = 0
    for _, piece in ipairs(self.stderr) do
      size = size + #piece
    end
    while size > STDERR_KEEP and #self.stderr > 1 do
      size = size - #table.remove(self.stderr, 1)
    end
  end)
  return true
end

--- Start the server and send initialize / initialized.
--- opts: cmd, cwd, init_options, capabilities, on_notification(method, params),
---       on_request(method, params, respond, id) where respond(result, err) may be called later,
---       on_exit(code, signal). Every callback runs on the main loop.
--- on_ready(err, result) is called once: when initialize answers, or with the reason the server
--- could not start (its exit status and stderr).
function M.start(opts, on_ready)
  local self = setmetatable({
    opts = opts,
    ready = false,
    closed = false,
    pending = {},
    next_id = 0,
    stderr = {},
  }, Client)
  local ok, started, err = pcall(spawn, self, opts)
  if not ok or not started then
    self.closed = true
    local reason = tostring(ok and err or started)
    vim.schedule(function()
      on_ready({ code = -32099, message = 'cannot start ' .. table.concat(opts.cmd, ' ') .. ': ' .. reason })
    end)
    return self
  end
  local root = opts.cwd or vim.fn.getcwd()
  local v = vim.version()
  local params = {
    processId = vim.fn.getpid(),
    clientInfo = { name = 'tether.nvim', version = string.format('%d.%d.%d', v.major, v.minor, v.patch) },
    protocolVersion = 1,
    rootUri = vim.uri_from_fname(root),
    workspaceFolders = { { uri = vim.uri_from_fname(root), name = vim.fn.fnamemodify(root, ':t') } },
    capabilities = opts.capabilities or vim.empty_dict(),
    initializationOptions = opts.init_options,
  }
  if params.initializationOptions and vim.tbl_isempty(params.initializationOptions) then
    params.initializationOptions = nil
  end
  self:request('initialize', params, function(init_err, result)
    if not init_err then
      self.ready = true
      self.server = result
      self:notify('initialized', vim.empty_dict())
    end
    on_ready(init_err, result)
  end)
  return self
end

--- Send a request; callback(err, result) runs on the main loop, exactly once.
function Client:request(method, params, callback)
  if params == nil or (type(params) == 'table' and next(params) == nil) then
    params = vim.empty_dict() -- an empty Lua table would be sent as []
  end
  self.next_id = self.next_id + 1
  local id = self.next_id
  self.pending[id] = callback
  if not self:_write({ jsonrpc = '2.0', id = id, method = method, params = params }) then
    self.pending[id] = nil
    local reason = self.exit_code and self:exit_reason() or 'tether server is not running'
    vim.schedule(function()
      callback({ code = -32099, message = reason })
    end)
  end
  return id
end

function Client:notify(method, params)
  self:_write({ jsonrpc = '2.0', method = method, params = params })
end

--- shutdown / exit, and a SIGTERM if the server is still there a second later.
function Client:stop()
  if self.closed then
    return
  end
  self:request('shutdown', nil, function()
    self:notify('exit', nil)
  end)
  vim.defer_fn(function()
    if not self.closed and self.handle and not self.handle:is_closing() then
      self.handle:kill('sigterm')
    end
  end, 1000)
end

return M
