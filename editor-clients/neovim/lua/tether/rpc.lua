-- The JSON-RPC client: `tether serve` spawned through vim.lsp.rpc.start (LSP framing on stdio).
local M = {}

local Client = {}
Client.__index = Client

-- vim.lsp.rpc.start(cmd, dispatchers, extra) on 0.10+; start(cmd, cmd_args, dispatchers, extra) before.
local function rpc_start(cmd, dispatchers, extra)
  if vim.fn.has('nvim-0.10') == 1 then
    return vim.lsp.rpc.start(cmd, dispatchers, extra)
  end
  local args = vim.list_slice(cmd, 2)
  return vim.lsp.rpc.start(cmd[1], args, dispatchers, extra)
end
M._rpc_start = rpc_start

--- Start the server and send initialize / initialized.
--- opts: cmd, cwd, init_options, capabilities, on_notification(method, params),
---       on_request(method, params) -> result, err (called in a coroutine), on_exit(code, signal)
--- on_ready(err, result) is called once initialize has answered.
function M.start(opts, on_ready)
  local self = setmetatable({ ready = false, closed = false, waiting = {} }, Client)
  local dispatchers = {
    -- Both are scheduled (in order) so handlers may touch buffers on every version.
    notification = vim.schedule_wrap(function(method, params)
      if opts.on_notification then
        opts.on_notification(method, params)
      end
    end),
    server_request = function(method, params)
      if opts.on_request then
        return opts.on_request(method, params)
      end
      return nil, { code = -32601, message = 'method not found: ' .. method }
    end,
    on_exit = function(code, signal)
      self.closed = true
      if opts.on_exit then
        vim.schedule(function()
          opts.on_exit(code, signal)
        end)
      end
    end,
    on_error = function(code, err)
      self.last_error = { code = code, err = err }
    end,
  }
  local ok, rpc = pcall(rpc_start, opts.cmd, dispatchers, { cwd = opts.cwd })
  if not ok or not rpc then
    self.closed = true
    vim.schedule(function()
      on_ready({ code = -32099, message = 'cannot start ' .. table.concat(opts.cmd, ' ') .. ': ' .. tostring(rpc) })
    end)
    return self
  end
  self.rpc = rpc
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
  rpc.request('initialize', params, vim.schedule_wrap(function(err, result)
    if not err then
      self.ready = true
      self.server = result
      rpc.notify('initialized', vim.empty_dict())
    end
    on_ready(err, result)
  end))
  return self
end

--- Send a request; callback(err, result) runs on the main loop.
function Client:request(method, params, callback)
  if self.closed or not self.rpc then
    vim.schedule(function()
      callback({ code = -32099, message = 'tether server is not running' })
    end)
    return
  end
  if params == nil or (type(params) == 'table' and next(params) == nil) then
    params = vim.empty_dict() -- an empty Lua table would be sent as []
  end
  self.rpc.request(method, params, vim.schedule_wrap(callback))
end

function Client:notify(method, params)
  if self.rpc and not self.closed then
    self.rpc.notify(method, params)
  end
end

function Client:stop()
  if self.rpc and not self.closed then
    self.rpc.request('shutdown', nil, function()
      self.rpc.notify('exit', nil)
    end)
    vim.defer_fn(function()
      if not self.closed then
        self.rpc.terminate()
      end
    end, 1000)
  end
end

return M
